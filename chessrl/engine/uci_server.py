"""The UCI protocol, engine side: a policy becomes an engine that chess GUIs and lichess-bot can run.

:class:`UCIServer` reads one command line at a time (:meth:`UCIServer.handle`) and writes the
protocol's answers through ``out`` (``print`` by default). The policy is any function
``choose_move(board, request) -> uci | None``; the server owns everything else: the position,
the ``go`` parameters (:class:`SearchRequest`), options, and the checks that keep the engine
legal. :func:`serve` runs it on a stream until ``quit`` or end of file. No Ray, no torch.

>>> server = UCIServer(name="demo", author="chess-rl", choose_move=lambda board, request: "g1f3")
>>> server.handle("uci")
id name demo
id author chess-rl
option name Temperature type string default 0
uciok
True
>>> server.handle("isready")
readyok
True
>>> server.handle("position startpos moves e2e4 e7e5")
True
>>> server.handle("go wtime 60000 btime 60000 winc 1000 binc 1000")
bestmove g1f3
True
>>> server.handle("position startpos moves e2e4 e7e4")
info string error: position: illegal move 'e7e4' (move 2) in 'rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1'; keeping the previous position
True
>>> server.board.fen()
'rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2'
>>> server.handle("quit")
False

Behaviour worth knowing:

- The search is synchronous: ``go`` calls the policy and answers ``bestmove`` at once, whatever
  the clock says. ``go infinite`` and ``go ponder`` compute the move at once too (and report it
  as ``info pv``), but hold the ``bestmove`` back until ``stop`` (or ``ponderhit``), as the
  protocol requires. A command that needs the engine idle (``position``, ``go``, ``ucinewgame``,
  ``setoption``) while a search is held releases its ``bestmove`` first; ``quit`` drops it.
- Malformed input never raises and never changes the state: an unknown command, a bad FEN, an
  illegal move in a move list, a bad ``setoption`` value are each answered with
  ``info string error: ...`` and the previous position and options stay. Bad ``go`` parameters
  are reported and ignored, and the search still runs (a GUI waits for its ``bestmove``). As
  the protocol asks, a known command after unknown words still runs (``joho debug on``).
- The policy is checked: when it returns ``None``, a move that is not legal (or not among
  ``searchmoves``), or raises, the engine plays the first legal move in sorted UCI order and
  says so in an ``info string``. With no legal move it answers ``bestmove 0000``.
- Option ``Temperature`` (a decimal ``>= 0``, ``setoption name Temperature value 0.5``) reaches
  the policy as :attr:`SearchRequest.temperature`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TextIO

import chess

#: ``go`` parameters that take an integer (milliseconds, counts, plies).
INT_PARAMS: tuple[str, ...] = (
    "wtime",
    "btime",
    "winc",
    "binc",
    "movestogo",
    "movetime",
    "nodes",
    "depth",
    "mate",
)
#: ``go`` parameters that stand alone.
FLAG_PARAMS: tuple[str, ...] = ("infinite", "ponder")
GO_KEYWORDS: frozenset[str] = frozenset((*INT_PARAMS, *FLAG_PARAMS, "searchmoves"))


@dataclass(frozen=True)
class SearchRequest:
    """What a ``go`` asked for (times in milliseconds; ``None`` where the GUI did not say).

    >>> SearchRequest.parse("go wtime 300000 btime 290000 winc 2000 binc 2000 movestogo 40".split()[1:])
    (SearchRequest(wtime=300000, btime=290000, winc=2000, binc=2000, movestogo=40, movetime=None, nodes=None, depth=None, mate=None, infinite=False, ponder=False, searchmoves=(), temperature=0.0), [])
    """

    wtime: int | None = None
    btime: int | None = None
    winc: int | None = None
    binc: int | None = None
    movestogo: int | None = None
    movetime: int | None = None
    nodes: int | None = None
    depth: int | None = None
    mate: int | None = None
    infinite: bool = False
    ponder: bool = False
    #: Moves the search is restricted to (UCI strings); empty means every legal move.
    searchmoves: tuple[str, ...] = ()
    #: The ``Temperature`` option when the search started (0: the policy's best move).
    temperature: float = 0.0

    @property
    def deferred(self) -> bool:
        """Whether the ``bestmove`` must wait for ``stop`` (``infinite``) or ``ponderhit``."""
        return self.infinite or self.ponder

    @classmethod
    def parse(cls, args: list[str]) -> tuple[SearchRequest, list[str]]:
        """The request in the words after ``go``, and one problem per word that was ignored.

        >>> SearchRequest.parse(["movetime", "500", "depth", "x", "turbo"])[1]
        ["go: depth needs an integer, got 'x'; ignored", "go: unknown parameter 'turbo'; ignored"]
        """
        values: dict[str, object] = {}
        problems: list[str] = []
        i = 0
        while i < len(args):
            word = args[i]
            key = word.lower()
            i += 1
            if key in INT_PARAMS:
                if i >= len(args) or args[i].lower() in GO_KEYWORDS:
                    problems.append(f"go: {key} needs an integer value; ignored")
                    continue
                value = args[i]
                i += 1
                try:
                    values[key] = int(value)
                except ValueError:
                    problems.append(f"go: {key} needs an integer, got {value!r}; ignored")
            elif key in FLAG_PARAMS:
                values[key] = True
            elif key == "searchmoves":
                moves: list[str] = []
                while i < len(args) and args[i].lower() not in GO_KEYWORDS:
                    moves.append(args[i])
                    i += 1
                values[key] = tuple(moves)
            else:
                problems.append(f"go: unknown parameter {word!r}; ignored")
        return cls(**values), problems  # type: ignore[arg-type]


#: The policy: the position (a copy holding its move stack) and the request -> a UCI move.
Policy = Callable[[chess.Board, SearchRequest], "str | None"]


class UCIInputError(ValueError):
    """A command the server cannot use; reported as ``info string error: ...``."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _default_out(line: str) -> None:
    print(line, flush=True)


class UCIServer:
    """The engine side of UCI around a policy; :meth:`handle` takes one command line at a time.

    ``choose_move`` gets a copy of the position (its ``move_stack`` holds the moves given after
    ``startpos`` or the FEN) and the :class:`SearchRequest`; ``out`` writes one protocol line.
    ``temperature`` is the default of the ``Temperature`` option.
    """

    def __init__(
        self,
        name: str,
        author: str,
        choose_move: Policy,
        *,
        out: Callable[[str], None] = _default_out,
        temperature: float = 0.0,
    ) -> None:
        self.name = name
        self.author = author
        self.choose_move = choose_move
        self.out = out
        self.default_temperature = temperature
        self.temperature = temperature
        self.debug = False
        self.board = chess.Board()
        #: Whether a ``position`` was given since the start or the last ``ucinewgame``.
        self.position_set = False
        #: A search whose ``bestmove`` waits for ``stop``: (the move, the request).
        self.pending: tuple[str, SearchRequest] | None = None
        self._commands: dict[str, Callable[[list[str]], None]] = {
            "uci": self._uci,
            "isready": self._isready,
            "ucinewgame": self._ucinewgame,
            "position": self._position,
            "go": self._go,
            "stop": self._stop,
            "ponderhit": self._stop,
            "debug": self._debug,
            "setoption": self._setoption,
            "register": self._register,
        }

    # -- output ----------------------------------------------------------------------------

    def info(self, text: str) -> None:
        """Writes ``info string <text>`` (on one line)."""
        self.out(f"info string {_one_line(text)}")

    def error(self, text: str) -> None:
        """Writes ``info string error: <text>``."""
        self.info(f"error: {text}")

    # -- the loop's entry point ------------------------------------------------------------

    def handle(self, line: str) -> bool:
        """Processes one command line; ``False`` after ``quit``. Never raises on bad input.

        >>> server = UCIServer(name="demo", author="me", choose_move=lambda board, request: None)
        >>> server.handle("joho debug on"), server.debug
        info string error: unknown command 'joho' ignored
        (True, True)
        >>> server.handle("hello")
        info string error: unknown command 'hello'
        True
        """
        words = line.split()
        if not words:
            return True
        start = next((i for i, w in enumerate(words) if w in self._commands or w == "quit"), None)
        if start is None:
            self.error(f"unknown command {_one_line(line)!r}")
            return True
        if start > 0:
            self.error(f"unknown command {' '.join(words[:start])!r} ignored")
        command, args = words[start], words[start + 1 :]
        if command == "quit":
            return False
        try:
            if self.pending is not None and command not in ("isready", "debug", "stop", "ponderhit"):
                self._release()
            self._commands[command](args)
        except UCIInputError as exc:
            self.error(str(exc))
        except Exception as exc:  # a GUI must keep a working engine, whatever the input was
            self.error(f"{command}: internal error {type(exc).__name__}: {exc}")
        return True

    # -- commands --------------------------------------------------------------------------

    def _uci(self, args: list[str]) -> None:
        self.out(f"id name {_one_line(self.name)}")
        self.out(f"id author {_one_line(self.author)}")
        self.out(f"option name Temperature type string default {self.default_temperature:g}")
        self.out("uciok")

    def _isready(self, args: list[str]) -> None:
        self.out("readyok")

    def _register(self, args: list[str]) -> None:
        """Registration is not needed; the command is accepted and ignored."""

    def _ucinewgame(self, args: list[str]) -> None:
        self.board = chess.Board()
        self.position_set = False

    def _debug(self, args: list[str]) -> None:
        if len(args) != 1 or args[0].lower() not in ("on", "off"):
            raise UCIInputError(f"debug: expected 'on' or 'off', got {' '.join(args)!r}")
        self.debug = args[0].lower() == "on"

    def _setoption(self, args: list[str]) -> None:
        lowered = [a.lower() for a in args]
        if not args or lowered[0] != "name" or len(args) < 2:
            raise UCIInputError(f"setoption: expected 'name <id> [value <x>]', got {' '.join(args)!r}")
        at = lowered.index("value") if "value" in lowered else len(args)
        name = " ".join(args[1:at])
        value = " ".join(args[at + 1 :])
        if name.lower() != "temperature":
            raise UCIInputError(f"setoption: unknown option {name!r}; options: Temperature")
        try:
            temperature = float(value)
        except ValueError:
            temperature = math.nan
        if not (math.isfinite(temperature) and temperature >= 0):
            raise UCIInputError(
                f"setoption: Temperature must be a number >= 0, got {value!r}; keeping {self.temperature:g}"
            )
        self.temperature = temperature

    def _position(self, args: list[str]) -> None:
        self.board = self.parse_position(args, self.board)
        self.position_set = True

    @staticmethod
    def parse_position(args: list[str], previous: chess.Board | None = None) -> chess.Board:
        """The board for ``position startpos|fen <FEN> [moves ...]`` (the words after ``position``).

        Raises :class:`UCIInputError` naming the problem.

        >>> UCIServer.parse_position("fen 4k3/P7/8/8/8/8/8/4K3 w - - 0 1 moves a7a8q".split()).fen()
        'Q3k3/8/8/8/8/8/8/4K3 b - - 0 1'
        """
        keep = "; keeping the previous position" if previous is not None else ""
        if not args:
            raise UCIInputError(f"position: expected 'startpos' or 'fen <FEN>', got nothing{keep}")
        lowered = [a.lower() for a in args]
        at = lowered.index("moves") if "moves" in lowered else len(args)
        kind, setup, moves = lowered[0], args[1:at], args[at + 1 :]
        if kind == "startpos":
            if setup:
                raise UCIInputError(
                    f"position: unexpected {' '.join(setup)!r} after startpos (expected 'moves'){keep}"
                )
            board = chess.Board()
        elif kind == "fen":
            fen = " ".join(setup)
            if not setup:
                raise UCIInputError(f"position: 'fen' needs a FEN{keep}")
            try:
                board = chess.Board(fen)
            except ValueError as exc:
                raise UCIInputError(f"position: bad FEN {fen!r}: {exc}{keep}") from None
            status = board.status()
            if status != chess.STATUS_VALID:
                problems = [s.name.lower() for s in chess.Status if s and s.name and s in status]
                raise UCIInputError(f"position: impossible position {fen!r} ({', '.join(problems)}){keep}")
        else:
            raise UCIInputError(f"position: expected 'startpos' or 'fen <FEN>', got {args[0]!r}{keep}")
        for n, text in enumerate(moves, start=1):
            try:
                move = board.parse_uci(text)
            except ValueError:
                move = None
            if not move:  # None, or the null move 0000
                raise UCIInputError(f"position: illegal move {text!r} (move {n}) in {board.fen()!r}{keep}")
            board.push(move)
        return board

    def _go(self, args: list[str]) -> None:
        request, problems = SearchRequest.parse(args)
        for problem in problems:
            self.error(problem)
        if not self.position_set:
            self.error("go without a position; searching the start position")
            self.board = chess.Board()
            self.position_set = True
        request = replace(request, searchmoves=self._searchmoves(request.searchmoves))
        request = replace(request, temperature=self.temperature)
        move = self.search(request)
        if request.deferred:
            self.pending = (move, request)
            self.out(f"info pv {move}" if move != "0000" else "info string no legal move")
        else:
            self.out(f"bestmove {move}")

    def _searchmoves(self, moves: tuple[str, ...]) -> tuple[str, ...]:
        legal: list[str] = []
        for text in moves:
            try:
                move = self.board.parse_uci(text)
            except ValueError:
                move = None
            if move:
                legal.append(self.board.uci(move))
            else:
                self.error(f"go: searchmoves: {text!r} is not legal here; ignored")
        return tuple(legal)

    def _stop(self, args: list[str]) -> None:
        if self.pending is not None:
            self._release()

    def _release(self) -> None:
        move, _ = self.pending  # type: ignore[misc]
        self.pending = None
        self.out(f"bestmove {move}")

    # -- the search ------------------------------------------------------------------------

    def search(self, request: SearchRequest) -> str:
        """The move to play in :attr:`board`: the policy's when it is legal, else a fallback."""
        legal = sorted(self.board.uci(m) for m in self.board.legal_moves)
        if not legal:
            return "0000"
        allowed = [m for m in legal if m in request.searchmoves] if request.searchmoves else legal
        started = time.perf_counter()
        try:
            proposal = self.choose_move(self.board.copy(), request)
        except Exception as exc:  # the policy's bug must not cost the game
            self.error(f"the policy failed: {type(exc).__name__}: {exc}")
            proposal = None
        move = self._legal(proposal, allowed)
        if self.debug:
            fields = {k: v for k, v in asdict(request).items() if v not in (None, False, ())}
            self.info(
                f"debug: fen {self.board.fen()} request {fields} policy {proposal!r} "
                f"in {time.perf_counter() - started:.3f} s"
            )
        if move is None:
            move = allowed[0]
            what = "no move" if proposal is None else f"{proposal!r}, not a legal move here"
            self.info(f"the policy gave {what}; playing {move}, the first legal move in UCI order")
        return move

    def _legal(self, proposal: object, allowed: list[str]) -> str | None:
        if not isinstance(proposal, str):
            return None
        try:
            move = self.board.parse_uci(proposal.strip())
        except ValueError:
            return None
        text = self.board.uci(move) if move else None
        return text if text in allowed else None


def serve(stdin: TextIO, server: UCIServer) -> None:
    """Feeds ``server`` the lines of ``stdin`` until ``quit`` or end of file.

    >>> import io
    >>> serve(io.StringIO("isready\\nquit\\nisready\\n"), UCIServer("demo", "me", lambda b, r: None))
    readyok
    """
    for line in iter(stdin.readline, ""):
        if not server.handle(line):
            return
