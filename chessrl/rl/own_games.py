"""GRPO prompts from the policy's own games: the positions the policy itself reaches, played
against itself, a random mover or its frozen start (:class:`OwnGames`), asked in the text format
it trains on (:mod:`chessrl.rl.grpo`'s prompts).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import chess
import torch

from chessrl.rl.grpo import Prompt, board_prompt, moves_prompt, policy_prompt
from chessrl.rl.scorer_policy import ScorerPolicy, is_scorer

OWN_OPPONENTS = ("self", "random", "start", "random+start")


class OwnGames:
    """Games the current policy plays, its moves drawn from the masked policy (a scorer's: from
    its softmax over the legal moves, :class:`~chessrl.rl.scorer_policy.ScorerPolicy`), each continued
    from a position of the training games: the positions the policy itself reaches become
    prompts. ``opponent``: ``self`` (the policy plays both sides), ``random`` (a random legal
    mover), ``start`` (the policy's frozen start, its masked argmax: the sft model an SPRT
    measures against) or ``random+start`` (games alternate between the two). Each call moves
    every live game on by ``stride`` plies (one batched forward pass a ply) and asks its
    position with the policy to move; a game that ends, or passes ``max_plies``, starts again
    from the next start position.

    >>> from chessrl.lm.models import build_model
    >>> model, tok = build_model("tiny")
    >>> games = OwnGames([("e2e4",), ("d2d4", "d7d5")], live=2, text_format="moves")
    >>> prompts = games.prompts(model, tok, temperature=1.0)
    >>> [len(p.text.split()) for p in prompts], prompts[0].phase
    ([3, 4], 'own')
    >>> games = OwnGames([("e2e4",)], live=1, text_format="board", opponent="random")
    >>> [p] = games.prompts(model, tok, temperature=1.0)
    >>> p.text.split()[1]  # the policy plays black here (black was to move at the start)
    'b'
    """

    def __init__(
        self,
        starts: Sequence[Sequence[str]],
        *,
        live: int,
        text_format: str = "moves",
        stride: int = 2,
        max_plies: int = 160,
        opponent: str = "self",
        seed: int = 0,
    ) -> None:
        if not starts:
            raise ValueError("OwnGames needs at least one start position")
        if opponent not in OWN_OPPONENTS:
            raise ValueError(f"unknown opponent {opponent!r}; opponents: {', '.join(OWN_OPPONENTS)}")
        self.starts = [tuple(s) for s in starts]
        self.next_start = 0
        self.text_format, self.stride, self.max_plies = text_format, stride, max_plies
        self.opponents = {"random+start": ("random", "start")}.get(opponent, (opponent,))
        self.rng = random.Random(seed)
        self.games: list[list[str]] = []
        self.boards: list[chess.Board] = []  # each game's position, kept in step with its moves
        self.sides: list[chess.Color] = []  # the colour the policy plays in each game
        self.against: list[str] = []  # each game's opponent
        for _ in range(live):
            self._fresh(None)

    def _fresh(self, i: int | None) -> None:
        start = self.starts[self.next_start % len(self.starts)]
        opponent = self.opponents[self.next_start % len(self.opponents)]
        self.next_start += 1
        side = len(start) % 2 == 0  # the side to move at the start: white after an even ply count
        if i is None:
            self.games.append(list(start))
            self.boards.append(self._board(start))
            self.sides.append(side)
            self.against.append(opponent)
        else:
            self.games[i], self.sides[i], self.against[i] = list(start), side, opponent
            self.boards[i] = self._board(start)

    @staticmethod
    def _board(moves: Sequence[str]) -> chess.Board:
        board = chess.Board()
        for m in moves:
            board.push_uci(m)
        return board

    def _over(self, i: int, board: chess.Board) -> bool:
        return board.is_game_over(claim_draw=True) or len(self.games[i]) >= self.max_plies

    def _ply(
        self, model: Any, tokenizer: object, temperature: float, start: Any, movers: tuple[str, ...]
    ) -> None:
        """One ply of every live game whose mover is in ``movers`` (``policy``, ``opponent``),
        restarting the ones that ended first: the policy's moves in one batched pass, the start
        model's in another, the random mover's drawn here."""
        from chessrl.lm.formats import get_format
        from chessrl.lm.masked import answer_spaced, masked_moves
        from chessrl.lm.models import prompt_ids

        fmt = get_format(self.text_format)
        for i, board in enumerate(self.boards):
            if self._over(i, board):
                self._fresh(i)
        boards = self.boards
        turn: dict[str, list[int]] = {"policy": [], "start": [], "random": []}
        for i, board in enumerate(boards):
            if self.against[i] == "self" or board.turn == self.sides[i]:
                if "policy" in movers:
                    turn["policy"].append(i)
            elif "opponent" in movers:
                turn[self.against[i]].append(i)
        for who, net, temp in (("policy", model, temperature), ("start", start, 0.0)):
            idx = turn[who]
            if not idx:
                continue
            if net is None:
                raise ValueError("OwnGames: games against the start model need the start model")
            if is_scorer(net):  # a reward model as the policy: its moves, a position at a time
                policy = ScorerPolicy(net, tokenizer, temperature=max(temp, 1e-6))
                for i in idx:
                    self._push(i, policy.sample(boards[i]) if temp > 0 else policy.best(boards[i]))
                continue
            rows = [prompt_ids(tokenizer, fmt.prompt_for(boards[i], self.games[i])) for i in idx]  # type: ignore[arg-type]
            spaced = [answer_spaced(fmt, self.games[i]) for i in idx]
            choices = masked_moves(net, tokenizer, [boards[i] for i in idx], rows, spaced, temperature=temp)
            for i, choice in zip(idx, choices, strict=True):
                self._push(i, choice.moves[0])
        for i in turn["random"]:
            self._push(i, self.rng.choice(sorted(m.uci() for m in boards[i].legal_moves)))

    def _push(self, i: int, move: str) -> None:
        self.games[i].append(move)
        self.boards[i].push_uci(move)

    def _waiting(self) -> bool:
        """Whether a game has ended or waits for its opponent's move."""
        for i, board in enumerate(self.boards):
            if self._over(i, board) or (self.against[i] != "self" and board.turn != self.sides[i]):
                return True
        return False

    def prompts(
        self, model: torch.nn.Module, tokenizer: object, temperature: float = 1.0, start: Any = None
    ) -> list[Prompt]:
        """Move every live game on and return one policy prompt per game (phase ``own``), the
        policy to move. ``start``: the frozen start model (opponent ``start``)."""
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for _ in range(self.stride):
                    self._ply(model, tokenizer, temperature, start, ("policy", "opponent"))
                for _ in range(3):  # restarted games, or ones that ended on the policy's move
                    if not self._waiting():
                        break
                    self._ply(model, tokenizer, temperature, start, ("opponent",))
        finally:
            model.train(was_training)
        out = []
        for g, board in zip(self.games, self.boards, strict=True):
            if self.text_format == "moves":
                prompt = moves_prompt(g, "own")
            elif self.text_format in ("board", "facts"):
                # the moves kept for the grade: a repetition the policy walks into is seen
                prompt = board_prompt(board.fen(), "own", g, text_format=self.text_format)
            else:
                prompt = policy_prompt(board.fen(), "own")
            out.append(prompt)
        return out
