"""One game between two players, openings, adjudication, and PGN out. Ray-free.

>>> from chessrl.arena.players import RandomPlayer
>>> game = play_game(RandomPlayer("a"), RandomPlayer("b"), opening=("e2e4", "e7e5"), max_plies=20, seed=1)
>>> game.result, game.termination, len(game.moves)
('1/2-1/2', 'max_plies', 20)
>>> chess.pgn.read_game(io.StringIO(game_pgn(game))).headers["Termination"]
'max_plies'

Adjudication: the game ends at checkmate, stalemate, insufficient material, threefold
repetition or the fifty-move rule (claimed at once), at ``max_plies`` (a draw, or with
``adjudicate_cp`` the engine's verdict: :func:`adjudicate`), when a player
forfeits (it made no legal move under the forfeit policy), or — optionally — when an engine has
seen the side to move at ``resign_cp`` or worse for ``resign_plies`` plies in a row.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from chessrl.arena.players import Player
from chessrl.arena.suites import parse_epd
from cluster.errors import InputDataError

#: ``(fen) -> centipawns from the side to move`` for engine-verified resignation.
Evaluator = Callable[[str], int | None]


@dataclass(frozen=True)
class Opening:
    """Where a game starts: a FEN (``None`` = the start position) and moves played from it."""

    fen: str | None = None
    moves: tuple[str, ...] = ()
    name: str = ""


@dataclass
class ArenaGame:
    """A finished game, with what each side needed to play it."""

    white: str
    black: str
    result: str
    termination: str
    moves: list[str]
    opening: Opening = field(default_factory=Opening)
    comments: list[str] = field(default_factory=list)
    illegal_attempts: dict[str, int] = field(default_factory=lambda: {"white": 0, "black": 0})
    first_attempt_legal: dict[str, int] = field(default_factory=lambda: {"white": 0, "black": 0})
    fallbacks: dict[str, int] = field(default_factory=lambda: {"white": 0, "black": 0})
    player_moves: dict[str, int] = field(default_factory=lambda: {"white": 0, "black": 0})

    def score_for(self, name: str) -> float:
        """1, 0.5 or 0 for ``name`` (white or black of this game)."""
        white = {"1-0": 1.0, "0-1": 0.0}.get(self.result, 0.5)
        return white if name == self.white else 1.0 - white

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["opening"] = {
            "fen": self.opening.fen,
            "moves": list(self.opening.moves),
            "name": self.opening.name,
        }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArenaGame:
        """The inverse of :meth:`to_dict` (keys it does not know, like a task key, are ignored)."""
        o = data.get("opening") or {}
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(
            **{**known, "opening": Opening(o.get("fen"), tuple(o.get("moves", ())), o.get("name", ""))}
        )


def play_game(
    white: Player,
    black: Player,
    *,
    opening: Opening | Sequence[str] = (),
    max_plies: int = 300,
    seed: int = 0,
    evaluator: Evaluator | None = None,
    resign_cp: int | None = None,
    resign_plies: int = 6,
    adjudicate_cp: int | None = None,
) -> ArenaGame:
    """Play one game; the opening's moves are played for both sides first. With an ``evaluator``
    and ``adjudicate_cp``, a game that reaches ``max_plies`` is decided by the engine: the side
    ahead by ``adjudicate_cp`` centipawns or more wins (``adjudicated``), else it is drawn."""
    if not isinstance(opening, Opening):
        opening = Opening(moves=tuple(opening))
    board = chess.Board(opening.fen) if opening.fen else chess.Board()
    for uci in opening.moves:
        board.push_uci(uci)
    game = ArenaGame(
        white=white.name, black=black.name, result="*", termination="", moves=[], opening=opening
    )
    white.new_game(seed)
    black.new_game(seed + 1)
    losing_streak = {chess.WHITE: 0, chess.BLACK: 0}
    while True:
        outcome = board.outcome(claim_draw=True)
        if outcome is not None:
            game.result = outcome.result()
            game.termination = outcome.termination.name.lower()
            break
        if len(game.moves) >= max_plies:
            game.result, game.termination = "1/2-1/2", "max_plies"
            if evaluator is not None and adjudicate_cp is not None:
                game.result, game.termination = adjudicate(board, evaluator(board.fen()), adjudicate_cp)
            break
        side = "white" if board.turn == chess.WHITE else "black"
        player = white if board.turn == chess.WHITE else black
        choice = player.move(board)
        game.player_moves[side] += 1
        game.illegal_attempts[side] += choice.illegal_attempts
        game.first_attempt_legal[side] += int(choice.first_attempt_legal)
        game.fallbacks[side] += int(choice.fallback)
        if choice.move not in {m.uci() for m in board.legal_moves}:  # None, unreadable or illegal
            game.result = "0-1" if board.turn == chess.WHITE else "1-0"
            game.termination = "forfeit"
            game.comments.append(choice.comment or f"{player.name} made no legal move")
            break
        board.push_uci(choice.move)
        game.moves.append(choice.move)
        game.comments.append(choice.comment)
        if evaluator is not None and resign_cp is not None and not board.is_game_over():
            cp = evaluator(board.fen())
            mover = board.turn
            losing_streak[mover] = losing_streak[mover] + 1 if cp is not None and cp <= -resign_cp else 0
            if losing_streak[mover] >= resign_plies:
                game.result = "0-1" if mover == chess.WHITE else "1-0"
                game.termination = "resign_adjudicated"
                break
    return game


def adjudicate(board: chess.Board, cp: int | None, threshold: int) -> tuple[str, str]:
    """``(result, termination)`` of a game stopped at the ply cap, from the engine's ``cp`` for
    the side to move: ahead by ``threshold`` or more wins, behind by as much loses, else a draw.

    >>> black_to_move = chess.Board("4k3/8/8/8/8/8/8/Q3K3 b - - 0 1")
    >>> adjudicate(black_to_move, -900, 300), adjudicate(black_to_move, 50, 300), adjudicate(black_to_move, None, 300)
    (('1-0', 'adjudicated'), ('1/2-1/2', 'adjudicated'), ('1/2-1/2', 'max_plies'))
    """
    if cp is None:
        return "1/2-1/2", "max_plies"
    if abs(cp) < threshold:
        return "1/2-1/2", "adjudicated"
    mover_wins = cp > 0
    white_wins = mover_wins == (board.turn == chess.WHITE)
    return ("1-0" if white_wins else "0-1"), "adjudicated"


def game_pgn(
    game: ArenaGame, *, event: str = "chess-rl arena", round_: str = "?", extra: dict[str, str] | None = None
) -> str:
    """The game as PGN: players, result, termination; illegal attempts and fallbacks as comments."""
    board = chess.Board(game.opening.fen) if game.opening.fen else chess.Board()
    pgn = chess.pgn.Game()
    if game.opening.fen:
        pgn.setup(board)
    pgn.headers.update(
        {
            "Event": event,
            "Round": round_,
            "White": game.white,
            "Black": game.black,
            "Result": game.result,
            "Termination": game.termination,
            **(extra or {}),
        }
    )
    if game.opening.name:
        pgn.headers["Opening"] = game.opening.name
    node: chess.pgn.GameNode = pgn
    for uci in game.opening.moves:
        node = node.add_variation(chess.Move.from_uci(uci))
    if game.opening.moves:
        node.comment = "book"
    for uci, comment in zip(game.moves, game.comments + [""] * len(game.moves), strict=False):
        node = node.add_variation(chess.Move.from_uci(uci))
        if comment:
            node.comment = comment
    if game.termination == "forfeit" and game.comments:
        node.comment = (node.comment + " " if node.comment else "") + game.comments[-1]
    buf = io.StringIO()
    print(pgn, file=buf, end="\n\n")
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# openings


def random_openings(n: int, plies: int, seed: int) -> list[Opening]:
    """``n`` openings of ``plies`` seeded random legal moves (none ends the game)."""
    rng = random.Random(seed)
    out: list[Opening] = []
    while len(out) < n:
        board = chess.Board()
        for _ in range(plies):
            legal = sorted(m.uci() for m in board.legal_moves)
            board.push_uci(rng.choice(legal))
            if board.is_game_over():
                break
        if not board.is_game_over():
            out.append(Opening(moves=tuple(m.uci() for m in board.move_stack), name=f"random-{len(out)}"))
    return out


def heldout_openings(
    games: Sequence[Mapping[str, Any]], n: int, seed: int, plies: tuple[int, int] = (6, 12)
) -> list[Opening]:
    """Up to ``n`` openings a player would meet: the first ``p`` moves of held-out games (rows
    with a ``moves`` string of UCI moves), one a game in a seeded shuffle, ``p`` drawn uniformly
    in ``plies`` (inclusive). A game too short for its ply, over there, or with an illegal move
    in its first ``plies[1]`` gives none that time; with fewer usable games than ``n`` the games
    are gone through again with new plies (never one ``(game, ply)`` twice) until none is left.

    >>> games = [{"moves": "e2e4 e7e5 g1f3 b8c6"}, {"moves": "d2d4 d7d5"}, {"moves": "e2e4 e7e9"}]  # the last corrupt
    >>> [o.moves for o in heldout_openings(games, 3, seed=7, plies=(1, 2))]
    [('e2e4',), ('d2d4',), ('e2e4', 'e7e5')]
    >>> [o.name for o in heldout_openings(games, 10, seed=7, plies=(1, 2))]  # 2 usable games x 2 plies
    ['heldout-0', 'heldout-1', 'heldout-2', 'heldout-3']
    """
    lo, hi = plies
    if not 0 <= lo <= hi:
        raise ValueError(f"plies must be 0 <= min <= max, got {lo} {hi}")
    rng = random.Random(seed)
    order = list(range(len(games)))
    rng.shuffle(order)
    usable: dict[int, set[int]] = {}  # game -> the plies whose position is playable (read once)
    left = {i: list(range(lo, hi + 1)) for i in order}  # game -> the plies not drawn yet
    out: list[Opening] = []
    while len(out) < n and left:
        for i in order:
            if len(out) == n:
                break
            if i not in left:
                continue
            ply = left[i].pop(rng.randrange(len(left[i])))
            if i not in usable:
                usable[i] = _playable_plies(str(games[i].get("moves") or ""), lo, hi)
            if ply in usable[i]:
                moves = tuple(str(games[i]["moves"]).split()[:ply])
                out.append(Opening(moves=moves, name=f"heldout-{len(out)}"))
            if not set(left[i]) & usable[i]:
                del left[i]
    return out


def _playable_plies(moves: str, lo: int, hi: int) -> set[int]:
    """The plies in ``[lo, hi]`` after which ``moves`` (UCI) leaves a game to play; none if one of
    its first ``hi`` moves is not a legal UCI move."""
    board = chess.Board()
    out = {0} if lo == 0 else set()
    for ply, uci in enumerate(moves.split()[:hi], start=1):
        try:
            move = chess.Move.from_uci(uci)
        except ValueError:
            return set()
        if not board.is_legal(move):
            return set()
        board.push(move)
        if ply >= lo and board.outcome(claim_draw=True) is None:
            out.add(ply)
    return out


def book_openings(path: str | Path, *, max_plies: int = 12) -> list[Opening]:
    """Openings from an EPD file (one position per line) or a PGN file (each game's first
    ``max_plies`` mainline moves). A bad line is an :class:`InputDataError` naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"opening book {path} does not exist")
    out: list[Opening] = []
    if path.suffix.lower() == ".epd":
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                board, ops = parse_epd(line)
            except ValueError as exc:
                raise InputDataError(f"{path}:{number}: not an EPD position ({exc})") from None
            if board.is_game_over():
                continue
            out.append(Opening(fen=board.fen(), name=str(ops.get("id", f"{path.stem}-{number}"))))
    else:
        with path.open(errors="replace") as handle:
            while (game := chess.pgn.read_game(handle)) is not None:
                moves = [m.uci() for m in list(game.mainline_moves())[:max_plies]]
                fen = game.board().fen() if "FEN" in game.headers else None  # a game from a set-up position
                if moves:
                    name = game.headers.get("Opening", f"{path.stem}-{len(out)}")
                    out.append(Opening(fen=fen, moves=tuple(moves), name=name))
    if not out:
        raise InputDataError(f"opening book {path} holds no usable opening")
    return out
