"""Engine-annotated positions: Stockfish's value of every legal move of a board, and the board's
own value, as one record (:class:`Annotation`), one Parquet row (:data:`ANNOTATION_SCHEMA`).

One search a position covers every legal move: MultiPV set above the legal-move count (Stockfish
caps it there) and a node budget of ``nodes_per_move`` times that count (:func:`annotation_limit`).
Measured on 40 positions of real games (2 AMD EPYC cores), against every child searched on its
own at 20,000 nodes: MultiPV at 50-200 nodes a move took 1.5-4.4 ms a position with Spearman
0.86 over the moves; each child on its own at 200 nodes took 9.9 ms for 0.79 (at 1,000, 32 ms
for 0.90). Values are from the side to move: ``cp`` as :attr:`chessrl.engine.client.Score.value`
(mates as ±(100,000 − distance)), ``expected`` its expected score in [0, 1] from Stockfish's
win/draw/loss estimate.

>>> import chess
>>> from chessrl.engine.client import Analysis, Line, Score
>>> board = chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")
>>> lines = [Line("d1d8", Score(None, 1, (1000, 0, 0)), ("d1d8",))] + [
...     Line(m.uci(), Score(0, None, (0, 1000, 0)), (m.uci(),)) for m in board.legal_moves if m.uci() != "d1d8"]
>>> a = annotate(board, Analysis(board.fen(), tuple(lines)))
>>> a.best_move, a.value_expected, len(a.moves) == board.legal_moves.count()
('d1d8', 1.0, True)
>>> m = a.mirrored()
>>> m.fen, m.best_move, m.mirrored() == a
('3r2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 0 1', 'd8d1', True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import chess
import pyarrow as pa

from chessrl.engine.client import MATE_CP, Analysis, Score, SearchLimit

#: A MultiPV above any position's legal-move count (218 at most), so one search lists every
#: legal move; within every Stockfish's range (15.1 takes up to 500, newer ones up to 256; a
#: value out of range is ignored and leaves MultiPV at 1, so ``unscored`` would say so).
ALL_MOVES_MULTIPV = 256

#: The annotated-positions table, one row a position.
ANNOTATION_SCHEMA = pa.schema(
    [
        pa.field("fen", pa.string()),
        pa.field("source", pa.string()),  # games | policy | random (| heldout)
        pa.field("game_id", pa.string()),
        pa.field("ply", pa.int32()),
        pa.field("phase", pa.string()),  # opening | middlegame | endgame
        pa.field("moves", pa.list_(pa.string())),  # every legal move, best first
        pa.field("cp", pa.list_(pa.int32())),  # each move's value for the side to move
        pa.field("expected", pa.list_(pa.float32())),  # each move's expected score in [0, 1]
        pa.field("best_move", pa.string()),
        pa.field("value_cp", pa.int32()),  # the position's own value (its best move's)
        pa.field("value_expected", pa.float32()),
        pa.field("terminal", pa.string()),  # checkmate / stalemate / ... when no move is legal
        pa.field("nodes", pa.int64()),  # nodes the search spent
        pa.field("unscored", pa.int32()),  # legal moves the search did not report (given the worst value)
        pa.field("history", pa.string()),  # the UCI moves from the start position to here, space-separated
    ]
)


def annotation_limit(board: chess.Board, nodes_per_move: int) -> SearchLimit:
    """The node budget of one all-moves search: ``nodes_per_move`` for each legal move.

    >>> annotation_limit(chess.Board(), 100).nodes
    2000
    """
    return SearchLimit(nodes=max(1, nodes_per_move) * max(1, board.legal_moves.count()))


@dataclass(frozen=True)
class Annotation:
    """A position with Stockfish's value of each legal move, best first (empty when the game is
    over there: ``terminal`` says why, and the value is the result for the side to move)."""

    fen: str
    moves: tuple[str, ...]
    cp: tuple[int, ...]
    expected: tuple[float, ...]
    value_cp: int
    value_expected: float
    terminal: str | None = None
    nodes: int = 0
    unscored: int = 0

    @property
    def best_move(self) -> str | None:
        return self.moves[0] if self.moves else None

    def mirrored(self) -> Annotation:
        """The same position with the colours swapped and the board flipped top to bottom
        (python-chess's ``Board.mirror``): every move mirrored, every value unchanged (values are
        the side to move's, and the side to move swaps with the pieces)."""
        board = chess.Board(self.fen).mirror()
        moves = tuple(_mirror_move(m) for m in self.moves)
        return replace(self, fen=board.fen(), moves=moves)

    def row(self, **fields: Any) -> dict[str, Any]:
        """One row of :data:`ANNOTATION_SCHEMA`; ``fields`` fills source, game_id, ply, phase, history."""
        return {
            "fen": self.fen,
            "moves": list(self.moves),
            "cp": list(self.cp),
            "expected": list(self.expected),
            "best_move": self.best_move,
            "value_cp": self.value_cp,
            "value_expected": self.value_expected,
            "terminal": self.terminal,
            "nodes": self.nodes,
            "unscored": self.unscored,
            "source": None,
            "game_id": None,
            "ply": None,
            "phase": None,
            "history": None,
            **fields,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Annotation:
        """The record of one table row (the inverse of :meth:`row`)."""
        return cls(
            fen=row["fen"],
            moves=tuple(row["moves"]),
            cp=tuple(int(c) for c in row["cp"]),
            expected=tuple(float(e) for e in row["expected"]),
            value_cp=int(row["value_cp"]),
            value_expected=float(row["value_expected"]),
            terminal=row.get("terminal"),
            nodes=int(row.get("nodes") or 0),
            unscored=int(row.get("unscored") or 0),
        )


def _mirror_move(uci: str) -> str:
    move = chess.Move.from_uci(uci)
    return chess.Move(
        chess.square_mirror(move.from_square), chess.square_mirror(move.to_square), move.promotion
    ).uci()


def annotate(board: chess.Board, analysis: Analysis) -> Annotation:
    """The annotation of ``board`` from one all-moves search (``analysis.lines``, one a root
    move); a finished game (``analysis.terminal``) has no moves and the result's value. A legal
    move the search did not report (a search stopped before it reached every root move) gets the
    worst reported value and is counted in ``unscored``; a reported move that is not legal is an
    error (the analysis belongs to another board)."""
    if analysis.terminal is not None or not analysis.lines:
        score = analysis.score
        return Annotation(board.fen(), (), (), (), score.value, score.expected, analysis.terminal or "none")
    legal = [m.uci() for m in board.legal_moves]
    seen: dict[str, Score] = {}
    for line in analysis.lines:
        if line.move not in seen:
            seen[line.move] = line.score
    stray = sorted(set(seen) - set(legal))
    if stray:
        raise ValueError(f"the analysis of {board.fen()!r} lists moves that are not legal there: {stray}")
    ranked = sorted(seen.items(), key=lambda kv: -kv[1].value)  # stable: the engine's order on ties
    worst = ranked[-1][1]
    missing = [m for m in legal if m not in seen]
    ranked += [(m, worst) for m in missing]
    best = ranked[0][1]
    return Annotation(
        fen=board.fen(),
        moves=tuple(m for m, _ in ranked),
        cp=tuple(_clamped(s.value) for _, s in ranked),
        expected=tuple(round(s.expected, 4) for _, s in ranked),
        value_cp=_clamped(best.value),
        value_expected=round(best.expected, 4),
        nodes=analysis.nodes,
        unscored=len(missing),
    )


def _clamped(value: int) -> int:
    return max(-MATE_CP, min(MATE_CP, int(value)))


def mirror_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Colour-flipped copies of table rows (for training: the flipped board is another legal
    position with the same values), their ``source`` suffixed ``+flip``."""
    out = []
    for row in rows:
        flipped = Annotation.from_row(row).mirrored()
        out.append(
            {
                **row,
                **flipped.row(),
                **{k: row.get(k) for k in ("game_id", "ply", "phase")},
                "source": f"{row.get('source')}+flip",
            }
        )
    return out
