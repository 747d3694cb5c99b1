"""Training data for chess language models, Ray-free: the held-out split, the training text of a
game, and packing token sequences into fixed-length blocks.

>>> is_heldout("00000000aaaaaaaa", 0.05), is_heldout("ffffffffaaaaaaaa", 0.05)
(True, False)
>>> training_text("e2e4 e7e5", "1-0", condition_on_result=True)
'1-0 e2e4 e7e5'
>>> pack_games([[1, 5, 6, 2], [1, 7, 2], [1, 8, 9, 9, 2]], block=8)
([[1, 8, 9, 9, 2, 1, 7, 2], [1, 5, 6, 2]], 0)

Packing keeps games whole: every block starts with a game's ``<bos>`` and holds only whole games
(``<bos> ... <eos>`` each), placed first-fit-decreasing, and the rest of a block is padding that
is not a target. nanoGPT's packing (concatenate, cut every ``block`` tokens) cuts a game across two
blocks, and the moves of its second half are then targets with no start of the game in view: the
model cannot know the board there and learns to guess. Those are the late plies, where a model
that reads moves must track the board, so on chess games whole-game blocks are worth the few
percent of padding. A game longer than a block keeps its first ``block`` tokens.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import chess

from chessrl.lm.formats import BoardFormat, MovesFormat, RookWorldFormat

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


#: Moves of the game before the position that an environment-task prompt shows.
ENV_HISTORY = 10


def rookworld_texts(
    moves: Sequence[str], n: int, *, env_share: float, rng: random.Random, fmt: BoardFormat | None = None
) -> list[str]:
    """Up to ``n`` RookWorld training texts from one game: each a position of the game (sampled
    without replacement) as a policy task ``P: <FEN> M: <the game's move>`` or, with probability
    ``env_share``, an environment task ``A: <FEN>+<move>+<recent moves>+<next FEN>+<reward>+
    <terminated>+<truncated>`` whose answer python-chess computes. A game that breaks the rules
    stops at its first bad move. With ``fmt`` (the board or facts format: the prompt computed
    from the position's board) every text is its policy task.

    >>> rookworld_texts(["e2e4"], 1, env_share=0.0, rng=random.Random(0))
    ['P: rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 M: e2e4']
    >>> rookworld_texts(["e2e4"], 1, env_share=1.0, rng=random.Random(0))[0].split("+")[:2]
    ['A: rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1', 'e2e4']
    """
    rookworld = RookWorldFormat()
    plies = sorted(rng.sample(range(len(moves)), min(n, len(moves))))
    board, done, out = chess.Board(), 0, []
    for ply in plies:
        try:
            for move in moves[done:ply]:
                board.push_uci(move)
            done = ply
            move = moves[ply]
            if chess.Move.from_uci(move) not in board.legal_moves:
                break
        except ValueError:
            break
        if fmt is None and rng.random() < env_share:
            history = moves[max(0, ply - ENV_HISTORY) : ply]
            out.append(rookworld.env_prompt(board, move, history) + rookworld.env_target(board, move))
        else:
            out.append((fmt or rookworld).policy_text(board, move))
    return out


def pack_games(sequences: Iterable[Sequence[int]], block: int) -> tuple[list[list[int]], int]:
    """Whole sequences into blocks of at most ``block`` tokens, first-fit-decreasing.

    Returns (blocks, sequences truncated to ``block`` tokens). Blocks are not padded: each holds
    whole sequences, longest first, in the first block with room.
    """
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    items = [list(seq) for seq in sequences]
    truncated = sum(1 for item in items if len(item) > block)
    items = [item[:block] for item in items]
    blocks: list[list[int]] = []
    for item in sorted(items, key=len, reverse=True):
        for candidate in blocks:
            if len(candidate) + len(item) <= block:
                candidate.extend(item)
                break
        else:
            blocks.append(item)
    return blocks, truncated
