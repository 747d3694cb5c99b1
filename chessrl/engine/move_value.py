"""What a move is worth to the side that plays it, on a scale that keeps ranking moves once a game
is won or lost: the grade the RL phases give a move and the target a judge learns.

Two scales (``VALUE_SCALES``), each a value in [0, 1] for one side:

- ``expected``: Stockfish's expected score from its win/draw/loss estimate, the project's grade
  until now. It is flat exactly where a random mover's blunders put a game: a queen up, every
  move that keeps the win scores ~1.0, so a learner is not told to take more, to mate, or to
  stop repeating moves (Stockfish, given a FEN, does not see a repetition coming).
- ``margin``: half that expected score, half a clipped-linear margin: centipawns clipped at
  :data:`CLIP_CP`, and above the clip a mate, the shorter the higher (:data:`MATE_STEP` per move,
  up to :data:`MATE_HORIZON` moves), mirrored for the side being mated. Beside it the rules:
  a move into a threefold repetition, a position claimable under the fifty-move rule, a stalemate
  or insufficient material is a draw (0.5) whatever the engine says of the position; checkmate
  is the top of the scale.

A hanging queen (White to move, 0.99 expected either way once it is taken):

>>> from chessrl.engine.client import Score
>>> won_queen = Score(cp=-950, mate=None, wdl=(0, 5, 995))       # Black to move after Rxd5
>>> mate_in_one = chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")
>>> _ = mate_in_one.push_uci("d1d8")                              # checkmate
>>> after = chess.Board("4k3/8/8/3R4/8/8/8/4K3 b - - 0 1")
>>> round(move_value(after, won_queen, "expected"), 3), round(move_value(mate_in_one, None, "expected"), 3)
(0.998, 1.0)
>>> round(move_value(after, won_queen, "margin"), 3), round(move_value(mate_in_one, None, "margin"), 3)
(0.868, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import chess

from chessrl.engine.client import MATE_CP, Score

ValueScale = Literal["expected", "margin"]
VALUE_SCALES: tuple[str, ...] = ("expected", "margin")

#: Centipawns beyond which more material says nothing more (15 pawns: a queen and a rook up).
CLIP_CP = 1500
#: A mate ranks above every centipawn margin; each move sooner is worth this much more.
MATE_STEP = 25
#: Mates further than this many moves rank as this far.
MATE_HORIZON = 20
#: The top of the margin scale: checkmate given (a mate in one move, played).
TOP = CLIP_CP + MATE_STEP * MATE_HORIZON

DRAW = Score(cp=0, mate=None, wdl=(0, 1000, 0))


def margin(score: Score) -> float:
    """The clipped-linear margin of ``score`` (for its side to move) in [-TOP, TOP].

    >>> margin(Score(cp=320, mate=None)), margin(Score(cp=4000, mate=None)), margin(Score(cp=None, mate=1))
    (320, 1500, 2000)
    >>> margin(Score(cp=None, mate=3)), margin(Score(cp=None, mate=-1)), margin(Score(cp=None, mate=40))
    (1950, -2000, 1500)
    """
    if score.mate is not None:
        moves = min(abs(score.mate), MATE_HORIZON + 1)
        above = CLIP_CP + MATE_STEP * (MATE_HORIZON + 1 - moves)
        return above if score.mate > 0 else -above
    return max(-CLIP_CP, min(CLIP_CP, int(score.cp or 0)))


def position_value(score: Score, scale: ValueScale) -> float:
    """The value in [0, 1] of a position for its side to move, from the engine's ``score`` there
    (what its best move is worth).

    >>> position_value(Score(cp=0, mate=None, wdl=(0, 1000, 0)), "margin")
    0.5
    >>> a, b = Score(cp=900, mate=None, wdl=(990, 10, 0)), Score(cp=300, mate=None, wdl=(990, 10, 0))
    >>> position_value(a, "expected") == position_value(b, "expected"), position_value(a, "margin") > position_value(b, "margin")
    (True, True)
    """
    if scale == "expected":
        return score.expected
    if scale != "margin":
        raise ValueError(f"value scale {scale!r}: one of {', '.join(VALUE_SCALES)}")
    return 0.5 * score.expected + 0.5 * (margin(score) + TOP) / (2 * TOP)


def mover_score(score_after: Score) -> Score:
    """The engine's score of the position after a move, seen by the side that played it: the
    sign flipped, win and loss swapped, and a mate counted from before the move (the opponent
    mated in ``k`` is the mover's mate in ``k + 1``).

    >>> mover_score(Score(cp=-120, mate=None, wdl=(10, 300, 690)))
    Score(cp=120, mate=None, wdl=(690, 300, 10))
    >>> mover_score(Score(cp=None, mate=-1)), mover_score(Score(cp=None, mate=2))
    (Score(cp=None, mate=2, wdl=None), Score(cp=None, mate=-2, wdl=None))
    """
    wdl = (score_after.wdl[2], score_after.wdl[1], score_after.wdl[0]) if score_after.wdl else None
    if score_after.mate is not None:
        mate = -score_after.mate + 1 if score_after.mate < 0 else -score_after.mate
        return Score(cp=None, mate=mate, wdl=wdl)
    return Score(cp=-int(score_after.cp or 0), mate=None, wdl=wdl)


def rules_outcome(board_after: chess.Board) -> Score | None:
    """The mover's score where the rules decide the position after a move (``board_after`` with
    the game's moves on its stack), else None: checkmate given is a mate in one; a stalemate,
    insufficient material, a threefold repetition or a fifty-move claim is a draw.

    >>> b = chess.Board()
    >>> for m in ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1", "f6g8"]:
    ...     _ = b.push_uci(m)
    >>> rules_outcome(b)                                   # the start position a third time
    Score(cp=0, mate=None, wdl=(0, 1000, 0))
    >>> rules_outcome(chess.Board()) is None
    True
    """
    if board_after.is_checkmate():
        return Score(cp=None, mate=1, wdl=(1000, 0, 0))
    if (
        board_after.is_stalemate()
        or board_after.is_insufficient_material()
        or board_after.is_repetition(3)
        or board_after.halfmove_clock >= 100
    ):
        return DRAW
    return None


def move_value(board_after: chess.Board, score_after: Score | None, scale: ValueScale) -> float:
    """The value in [0, 1] of the move that led to ``board_after`` for the side that played it,
    from the engine's ``score_after`` of that position (for its side to move; None where the game
    is over there). ``margin`` applies the rules first (:func:`rules_outcome`), so a repetition or
    a stalemate in a won position is the draw it is; ``expected`` is the old grade, the engine's
    expected score alone (a terminal position: its result)."""
    decided = rules_outcome(board_after) if scale == "margin" or score_after is None else None
    if decided is None and board_after.is_checkmate():
        decided = Score(cp=None, mate=1, wdl=(1000, 0, 0))
    if decided is not None:
        return position_value(decided, scale)
    if score_after is None:
        raise ValueError(f"no engine score for {board_after.fen()}, where the game is not over")
    return position_value(mover_score(score_after), scale)


#: An annotated ``cp`` beyond this is a mate: ±(MATE_CP - distance) (``Score.value``).
MATE_THRESHOLD = 90_000


def annotated_values(
    cp: Sequence[int] | None, expected: Sequence[float], scale: ValueScale = "margin"
) -> list[float]:
    """Each legal move's value in [0, 1] on a value scale from an annotated row's ``cp`` (the
    mover's centipawns, a mate as ±(100,000 - distance), as ``annotate`` writes them) and
    ``expected`` (its expected score): ``expected`` is that score alone (flat once a game is
    won); ``margin`` is :func:`position_value`'s margin scale with the row's expected score, so a
    mate ranks above material and more material above less (``cp`` may be None on the expected
    scale). sft's distillation takes their softmax (:func:`chessrl.lm.legality.soft_targets`).

    >>> mate, queen, pawn = annotated_values([99_999, 900, 300], [1.0, 0.99, 0.99])   # mate in one, +Q, +P
    >>> mate > queen > pawn, round(queen - pawn, 3)
    (True, 0.075)
    >>> annotated_values(None, [1.0, 0.99, 0.99], "expected") == [1.0, 0.99, 0.99]
    True
    """
    if scale == "expected":
        return [float(e) for e in expected]
    if scale != "margin" or cp is None:
        raise ValueError(
            f"value scale {scale!r} with cp {cp!r}: margin needs cp; scales {', '.join(VALUE_SCALES)}"
        )
    values = []
    for c, e in zip(cp, expected, strict=True):
        c = int(c)
        mate = (1 if c > 0 else -1) * max(1, MATE_CP - abs(c)) if abs(c) > MATE_THRESHOLD else None
        score = Score(cp=None if mate is not None else c, mate=mate, wdl=None)
        values.append(0.5 * float(e) + 0.5 * (margin(score) + TOP) / (2 * TOP))  # position_value's margin
    return values
