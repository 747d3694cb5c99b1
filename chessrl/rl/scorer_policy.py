"""A judge's shape as a policy: a sequence classifier (``chess-rl reward``'s model, a GPT-2 with
a one-label head) scores every legal move's text in its own format, and the policy is the softmax
of those scores over the legal moves at a temperature. Where a language model has to point at
the move its prompt's facts favour (which a tiny one does not learn in CPU minutes:
docs/results.md), this one reads each move's facts beside the move and scores it, as the judge
does; the judge played one ply deep scored 88.8% against a random mover (one seed).

A position's moves are scored in one forward pass that reads their shared beginning (the board,
who controls each square) once (:func:`chessrl.lm.shared_prefix.group_logits`), under the
caller's grad mode, so the same call gives a learner its log-probabilities and a player its
move. Ray-free.

>>> from chessrl.rl.reward import build_reward_model
>>> model, tok = build_reward_model("tiny")
>>> policy = ScorerPolicy(model, tok)
>>> moves, logp = policy.log_probs(chess.Board())
>>> len(moves), round(float(logp.exp().sum()), 4)
(20, 1.0)
>>> policy.best(chess.Board()) in moves
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chess
import torch

from chessrl.lm.shared_prefix import group_logits
from chessrl.rl.reward import RewardQuery, query_ids, reward_format


def is_scorer(model: Any) -> bool:
    """Whether ``model`` is a scorer (a sequence classifier, as ``chess-rl reward`` saves one)
    rather than a language model.

    >>> from chessrl.lm.models import build_model
    >>> from chessrl.rl.reward import build_reward_model
    >>> is_scorer(build_reward_model("tiny")[0]), is_scorer(build_model("tiny")[0])
    (True, False)
    """
    return hasattr(model, "score") and not hasattr(model, "lm_head")


def board_at(fen: str, history: str | Sequence[str] = "") -> chess.Board:
    """The board of ``fen`` with ``history`` (the UCI moves from the start position to it) on its
    stack where they lead there, so a repetition is seen; else the position alone.

    >>> board_at(chess.Board().fen(), "e2e4 e7e5").move_stack
    []
    >>> len(board_at("rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2", "e2e4 e7e5").move_stack)
    2
    """
    board = chess.Board()
    try:
        for m in history.split() if isinstance(history, str) else history:
            board.push_uci(m)
    except ValueError:
        return chess.Board(fen)
    return board if board.fen() == fen else chess.Board(fen)


def move_rows(tokenizer: Any, config: Any, board: chess.Board, moves: Sequence[str]) -> list[list[int]]:
    """The token ids a reward model of ``config`` scores for each of ``moves`` at ``board``: the
    game so far (from the board's root, its FEN unless the start) and the move, in the model's own
    text format (:func:`chessrl.rl.reward.query_ids`), as the judge was trained on them."""
    history = tuple(m.uci() for m in board.move_stack)
    root = board.root()
    fen = None if root.fen() == chess.STARTING_FEN else root.fen()
    fmt = reward_format(config)
    return [query_ids(tokenizer, RewardQuery(history, m, fen), fmt, board) for m in moves]


@dataclass
class ScorerPolicy:
    """``softmax(score(board, move) / temperature)`` over the legal moves of ``board``, the moves
    in UCI order (ties in :meth:`best` go to the first)."""

    model: Any
    tokenizer: Any
    temperature: float = 1.0

    def scores(
        self, board: chess.Board, moves: Sequence[str] | None = None
    ) -> tuple[list[str], torch.Tensor]:
        """The legal moves (sorted UCI; or ``moves``, some of them) and the model's score of each,
        under the caller's grad mode."""
        moves = sorted(m.uci() for m in board.legal_moves) if moves is None else list(moves)
        if not moves:
            raise ValueError(f"no legal move in {board.fen()}")
        rows = move_rows(self.tokenizer, self.model.config, board, moves)
        return moves, group_logits(self.model, rows, int(self.tokenizer.pad_token_id)).float()

    def log_probs(self, board: chess.Board) -> tuple[list[str], torch.Tensor]:
        """The legal moves and the policy's log-probability of each (they sum to one)."""
        moves, scores = self.scores(board)
        return moves, torch.log_softmax(scores / self.temperature, dim=-1)

    def sample(self, board: chess.Board, generator: torch.Generator | None = None) -> str:
        """A move drawn from the policy."""
        with torch.no_grad():
            moves, logp = self.log_probs(board)
        return moves[int(torch.multinomial(logp.exp(), 1, generator=generator))]

    def pick_moves(self, positions: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[str], float]:
        """The best move at each ``(fen, moves so far)`` position (after the moves, where they
        lead there) and the share of legal answers, 1: what the paired measure asks a policy
        (:class:`chessrl.arena.move_quality.MoveChooser`)."""
        return [self.best(board_at(fen, history)) for fen, history in positions], 1.0

    def best(self, board: chess.Board, moves: Sequence[str] | None = None) -> str:
        """The move of the highest score (the first on a tie) of the legal moves, or of ``moves``."""
        with torch.no_grad():
            moves, scores = self.scores(board, moves)
        values = scores.tolist()
        return moves[max(range(len(moves)), key=lambda i: (values[i], -i))]
