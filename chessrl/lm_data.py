"""Training data for chess language models, Ray-free: the held-out split, the training text of a
game, and packing token sequences into fixed-length blocks.

>>> is_heldout("00000000aaaaaaaa", 0.05), is_heldout("ffffffffaaaaaaaa", 0.05)
(True, False)
>>> training_text("e2e4 e7e5", "1-0", condition_on_result=True)
'1-0 e2e4 e7e5'
>>> pack_blocks([[1, 5, 6, 2], [1, 7, 2], [1, 8, 9, 9, 2]], block=4)
[[1, 5, 6, 2], [1, 7, 2, 1], [8, 9, 9, 2]]

Packing is nanoGPT's: games (each ``<bos> ... <eos>``) are concatenated and cut into blocks of
exactly ``block`` tokens, so no position is padding and every move is a training target; a game
may run across two blocks, and the last partial block of a batch is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from chessrl.formats import MovesFormat

T = TypeVar("T", bound=Mapping[str, Any])

RESULTS: tuple[str, ...] = ("1-0", "0-1", "1/2-1/2")


def is_heldout(game_id: str, fraction: float) -> bool:
    """A stable split by game id (content hash), the same in every run and on every worker."""
    return int(game_id[:8], 16) / 2**32 < fraction


def split_games(rows: Iterable[T], fraction: float) -> tuple[list[T], list[T], int]:
    """Rows with a ``game_id`` key -> (training rows, held-out rows, duplicates dropped).

    A game in two files (a masters database holds each game between two of its players twice)
    has one id: it is kept once, so it is neither trained on twice nor on both sides of the split.

    >>> rows = [{"game_id": "00000000aa"}, {"game_id": "ffffffffbb"}, {"game_id": "ffffffffbb"}]
    >>> train, held, dropped = split_games(rows, 0.05)
    >>> [r["game_id"] for r in train], [r["game_id"] for r in held], dropped
    (['ffffffffbb'], ['00000000aa'], 1)
    """
    train: list[T] = []
    held: list[T] = []
    seen: set[str] = set()
    dropped = 0
    for row in rows:
        game_id = row["game_id"]
        if game_id in seen:
            dropped += 1
            continue
        seen.add(game_id)
        (held if is_heldout(game_id, fraction) else train).append(row)
    return train, held, dropped


def result_prefix(result: str | None, condition_on_result: bool) -> str:
    """The conditioning prefix of a game: its result when asked for and known, else nothing."""
    return result if condition_on_result and result in RESULTS else ""


def training_text(moves: str, result: str | None, *, condition_on_result: bool = False) -> str:
    """One game as the model reads it (moves format), optionally prefixed by its result."""
    return MovesFormat().game_text(moves.split(), prefix=result_prefix(result, condition_on_result))


def pack_blocks(sequences: Iterable[Sequence[int]], block: int) -> list[list[int]]:
    """Concatenate ``sequences`` and cut them into blocks of exactly ``block`` tokens."""
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    stream = [token for seq in sequences for token in seq]
    return [stream[i : i + block] for i in range(0, len(stream) - block + 1, block)]
