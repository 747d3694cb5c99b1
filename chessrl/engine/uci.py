"""A lean, blocking UCI client: the subset of ``chess.engine.SimpleEngine`` that UCIEngine uses.

python-chess's SimpleEngine parses every ``info`` line of a search (legality-checking each PV move)
on an asyncio loop thread of its own. An engine pool searching at a fixed node count needs only
the last line per PV, and on a 2-CPU machine that parsing competes with Stockfish itself:
measured with ``bench/engine_pool.py``, the pool's Python cost per 20k-node search fell from
3.3 ms to 1.3 ms and the pool/raw ratio rose from 0.86 to 0.94. So this client reads lines from a
buffered pipe in the calling thread and parses only the last ``info ... pv`` per multipv index,
returning python-chess's own types (``PovScore``, ``PovWdl``, ``Move``, ``Option``).

It has no timeouts of its own: :class:`chessrl.engine.client.UCIEngine` runs every exchange, the
start-up handshake included, under a watchdog that kills the process; a killed process reads as
end of output and raises ``EngineTerminatedError``.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from typing import Any

import chess
import chess.engine


class _Transport:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def get_pid(self) -> int:
        return self._proc.pid


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class PipeEngine:
    """One UCI engine process over pipes. Start it, then :meth:`handshake` (under a watchdog)."""

    def __init__(self, path: str) -> None:
        self._proc = subprocess.Popen(
            [path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=-1
        )
        assert self._proc.stdout is not None and self._proc.stdin is not None
        self._out = self._proc.stdout
        self._in = self._proc.stdin
        self.transport = _Transport(self._proc)
        self.options: dict[str, chess.engine.Option] = {}
        self._game: object | None = None
        self._first = True
        self._multipv = 1

    def handshake(self) -> None:
        """``uci`` -> the options -> ``uciok``; then ``isready``."""
        self._send("uci")
        for line in self._lines():
            if line.startswith("option name "):
                option = _parse_option(line)
                self.options[option.name] = option
            elif line == "uciok":
                break
        self._ready()

    # -- plumbing -------------------------------------------------------------------------------
    def _send(self, line: str) -> None:
        try:
            self._in.write(line.encode() + b"\n")
            self._in.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise chess.engine.EngineTerminatedError(f"engine gone: {exc}") from None

    def _lines(self) -> Iterator[str]:
        readline = self._out.readline
        while True:
            raw = readline()
            if not raw:
                raise chess.engine.EngineTerminatedError("engine process died unexpectedly")
            yield raw.decode("utf-8", "replace").rstrip()

    def _ready(self) -> None:
        self._send("isready")
        for line in self._lines():
            if line == "readyok":
                return

    def configure(self, options: dict[str, Any]) -> None:
        for name, value in options.items():
            if name in self.options:
                self._send(f"setoption name {name} value {_fmt(value)}")

    def _position(self, board: chess.Board, limit: chess.engine.Limit, game: object | None) -> None:
        if self._first or game is not self._game:
            self._first = False
            self._game = game
            self._send("ucinewgame")
            self._ready()
        root = board.root()
        moves = " ".join(m.uci() for m in board.move_stack)
        fen = "startpos" if root == chess.Board() else f"fen {root.fen()}"
        self._send(f"position {fen}" + (f" moves {moves}" if moves else ""))
        go = ["go"]
        if limit.nodes is not None:
            go += ["nodes", str(limit.nodes)]
        if limit.depth is not None:
            go += ["depth", str(limit.depth)]
        if limit.time is not None:
            go += ["movetime", str(max(1, int(limit.time * 1000)))]
        self._send(" ".join(go))

    # -- SimpleEngine's calls -------------------------------------------------------------------
    def analyse(
        self,
        board: chess.Board,
        limit: chess.engine.Limit,
        *,
        multipv: int | None = None,
        game: object = None,
    ) -> list[chess.engine.InfoDict]:
        wanted = multipv or 1
        if wanted != self._multipv:
            self.configure({"MultiPV": wanted})
            self._multipv = wanted
        self._position(board, limit, game)
        last: dict[int, str] = {}
        for line in self._lines():
            if line.startswith("info ") and " pv " in line:
                tokens = line.split(" ")
                k = int(tokens[tokens.index("multipv") + 1]) if "multipv" in tokens else 1
                last[k] = line
            elif line.startswith("bestmove"):
                break
        return [_parse_info(last[k], board) for k in sorted(last)]

    def play(
        self, board: chess.Board, limit: chess.engine.Limit, *, game: object = None
    ) -> chess.engine.PlayResult:
        if self._multipv != 1:
            self.configure({"MultiPV": 1})
            self._multipv = 1
        self._position(board, limit, game)
        for line in self._lines():
            if line.startswith("bestmove"):
                parts = line.split()
                move = chess.Move.from_uci(parts[1]) if len(parts) > 1 and parts[1] != "(none)" else None
                if move is not None and move not in board.legal_moves:
                    raise chess.engine.EngineError(f"illegal bestmove {parts[1]!r} in {board.fen()!r}")
                return chess.engine.PlayResult(move, None)
        raise chess.engine.EngineTerminatedError("no bestmove")  # pragma: no cover

    def quit(self) -> None:
        try:
            self._send("quit")
            self._proc.wait(timeout=2)
        except Exception:
            self._proc.kill()
            self._proc.wait()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._in, self._out):
            with contextlib.suppress(Exception):
                stream.close()


def _parse_info(line: str, board: chess.Board) -> chess.engine.InfoDict:
    tokens = line.split(" ")
    info: dict[str, Any] = {}
    i = 1
    n = len(tokens)
    while i < n:
        key = tokens[i]
        if key in ("depth", "seldepth", "nodes", "multipv", "nps", "hashfull", "tbhits", "time"):
            value = int(tokens[i + 1])
            info[key] = value / 1000.0 if key == "time" else value
            i += 2
        elif key == "score":
            kind, value = tokens[i + 1], int(tokens[i + 2])
            score = chess.engine.Cp(value) if kind == "cp" else chess.engine.Mate(value)
            info["score"] = chess.engine.PovScore(score, board.turn)
            i += 3
            if i < n and tokens[i] in ("lowerbound", "upperbound"):
                info[tokens[i]] = True
                i += 1
        elif key == "wdl":
            info["wdl"] = chess.engine.PovWdl(
                chess.engine.Wdl(int(tokens[i + 1]), int(tokens[i + 2]), int(tokens[i + 3])), board.turn
            )
            i += 4
        elif key == "pv":
            pv = []
            probe = board.copy(stack=False)
            for text in tokens[i + 1 :]:
                move = chess.Move.from_uci(text)
                if not probe.is_legal(move):
                    break
                probe.push(move)
                pv.append(move)
            info["pv"] = pv
            break
        else:
            i += 1
    return info  # type: ignore[return-value]


def _parse_option(line: str) -> chess.engine.Option:
    """``option name UCI_Elo type spin default 1350 min 1350 max 2850`` -> an Option."""
    rest = line[len("option name ") :]
    name, _, spec = rest.partition(" type ")
    tokens = spec.split(" ")
    kind = tokens[0] if tokens else ""
    fields: dict[str, str] = {}
    var: list[str] = []
    key: str | None = None
    for token in tokens[1:]:
        if token in ("default", "min", "max", "var"):
            key = token
            if key == "var":
                var.append("")
            else:
                fields.setdefault(key, "")
            continue
        if key == "var":
            var[-1] = f"{var[-1]} {token}".strip()
        elif key is not None:
            fields[key] = f"{fields[key]} {token}".strip()

    def number(text: str | None) -> int | None:
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    default: Any = fields.get("default")
    if kind == "spin":
        default = number(default)
    elif kind == "check":
        default = default == "true"
    return chess.engine.Option(
        name=name,
        type=kind,
        default=default,
        min=number(fields.get("min")),
        max=number(fields.get("max")),
        var=var,
    )
