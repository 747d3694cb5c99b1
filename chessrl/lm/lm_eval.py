"""The language-model metrics of the sft phase, and the held-out positions they use, Ray-free.

Metrics (no masking of illegal moves, ever):

- legal-move rate: the share of held-out positions where the model's move (argmax, or sampled)
  is a legal UCI move there;
- top-1 agreement: the share where it is the move the game actually continued with.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import chess

from chessrl.lm.formats import MoveCounts, MovesFormat
from chessrl.lm.lm_data import result_prefix


@dataclass(frozen=True)
class HeldoutPosition:
    """A position from a held-out game: the moves before it and the move the game played."""

    moves_before: tuple[str, ...]
    next_move: str
    prefix: str = ""


def sample_positions(
    games: Iterable[tuple[str, str | None]], n: int, *, seed: int = 0, condition_on_result: bool = False
) -> list[HeldoutPosition]:
    """``n`` positions, one per game where possible, from ``(moves, result)`` pairs."""
    rng = random.Random(seed)
    pool = [(m.split(), r) for m, r in games if m]
    rng.shuffle(pool)
    out: list[HeldoutPosition] = []
    while pool and len(out) < n:
        for moves, result in pool:
            if len(out) >= n:
                break
            i = rng.randrange(len(moves))
            out.append(
                HeldoutPosition(tuple(moves[:i]), moves[i], result_prefix(result, condition_on_result))
            )
    return out


def within_context(
    positions: Sequence[HeldoutPosition], fits: Callable[[HeldoutPosition], bool]
) -> list[HeldoutPosition]:
    """``positions`` with each one whose prompt ``fits`` refuses moved back to the latest ply of
    its game that fits (the move the game played there its answer): a long game's late position
    would overflow the model's position embeddings. A position that fits stays as it is.

    >>> deep = HeldoutPosition(("e2e4", "e7e5", "g1f3", "b8c6"), "f1b5")
    >>> within_context([deep], lambda p: len(p.moves_before) <= 2)
    [HeldoutPosition(moves_before=('e2e4', 'e7e5'), next_move='g1f3', prefix='')]
    """
    out = []
    for pos in positions:
        if not pos.moves_before or fits(pos):  # (the first move's prompt fits any context)
            out.append(pos)
            continue
        lo, hi = 0, len(pos.moves_before) - 1  # the longest prefix that fits, by bisection
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(HeldoutPosition(pos.moves_before[:mid], pos.moves_before[mid], pos.prefix)):
                lo = mid
            else:
                hi = mid - 1
        out.append(HeldoutPosition(pos.moves_before[:lo], pos.moves_before[lo], pos.prefix))
    return out


def evaluate_moves(
    model: Any,
    tokenizer: Any,
    positions: Sequence[HeldoutPosition],
    *,
    temperature: float = 0.0,
    text_format: str = "moves",
) -> dict[str, float]:
    """Legal-move rate and top-1 agreement of the model's move on ``positions`` (unmasked);
    ``text_format="rookworld"`` asks with the policy task (``P: <FEN> M:``), ``board`` with the
    position's fixed-length encoding."""
    from chessrl.lm.formats import get_format
    from chessrl.lm.models import propose_moves

    fmt = MovesFormat()
    rookworld = get_format(text_format) if text_format != "moves" else None
    counts = MoveCounts()
    agree = 0
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        for pos in positions:
            board = chess.Board()
            for uci in pos.moves_before:
                board.push_uci(uci)
            [completion] = propose_moves(
                model,
                tokenizer,
                rookworld.policy_prompt(board)  # type: ignore[union-attr]
                if rookworld
                else fmt.prompt(pos.moves_before, prefix=pos.prefix),
                temperature=temperature,
                n=1,
            )
            parsed = fmt.parse(board, completion)
            counts.add(parsed)
            agree += int(parsed.move == pos.next_move)
    finally:
        if was_training:
            model.train()
    n = max(1, len(positions))
    return {
        "legal_rate": counts.legal_rate,
        "top1_agreement": agree / n,
        "illegal_rate": counts.counts["illegal"] / n,
        "unparseable_rate": counts.counts["unparseable"] / n,
    }
