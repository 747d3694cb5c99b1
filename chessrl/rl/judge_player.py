"""A reward model as a player: the judge's best legal move, one ply deep, so what a learned judge
knows of winning is measured in games (``evaluate --players judge:DIR random``) with no policy
between it and the board. Ray-free; ``evaluate`` builds it in its game tasks.

>>> from chessrl.rl.reward import build_reward_model
>>> model, tok = build_reward_model("tiny")
>>> player = JudgePlayer(model, tok)
>>> chess.Move.from_uci(player.move(chess.Board()).move) in chess.Board().legal_moves
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import chess

from chessrl.arena.players import MoveChoice
from chessrl.lm.masked import draw_claim_moves
from chessrl.rl.scorer_policy import ScorerPolicy


@dataclass
class JudgePlayer:
    """A reward model (``chess-rl reward``'s output) as a player: every legal move's text in the
    judge's own format (:func:`chessrl.rl.scorer_policy.move_rows`: the game so far, or the
    position, and the move), scored in one pass (:meth:`ScorerPolicy.best`); the highest score is played (ties: the first in UCI order),
    never a move that hands the opponent a draw claim while another exists (as masked models
    play). What a learned judge knows of winning, with no policy between it and the board."""

    model: Any
    tokenizer: Any
    name: str = "judge"

    def new_game(self, seed: int) -> None:
        pass

    def move(self, board: chess.Board) -> MoveChoice:
        moves = sorted(m.uci() for m in board.legal_moves)
        claims = draw_claim_moves(board)
        moves = [m for m in moves if m not in claims] or moves
        return MoveChoice(ScorerPolicy(self.model, self.tokenizer).best(board, moves))

    def close(self) -> None:
        pass
