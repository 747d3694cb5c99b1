"""Streaming PGN: split a byte stream into games, parse each with python-chess, filter, count.

The pieces are small and composable, so one process, a Ray Data pipeline and a test all use the
same code:

>>> raw = list(iter_raw_games(io.BytesIO(b'[White "A"]\\n\\n1. e4 e5 2. Nf3 1-0\\n\\n[White "B"]\\n\\n1. d4 *\\n')))
>>> len(raw)
2
>>> game = parse_game(decode_game(raw[0])[0])
>>> (game.moves, game.result, game.error)
(['e2e4', 'e7e5', 'g1f3'], '1-0', None)

Nothing is held in memory beyond one game (plus a read buffer): a 30 GB ``.pgn.zst`` streams
through :func:`open_pgn` and :func:`iter_raw_games`. Bad games are not fatal: they come back
with a ``skip`` reason, and :class:`PrepareCounts` adds the reasons up. Which games are kept
(time controls, ratings, terminations) is :mod:`chessrl.data.pgn_filters`.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import chess
import chess.pgn
import zstandard

from chessrl.data.games import GameRecord, game_id_for
from chessrl.data.pgn_filters import GameFilter, header_elo, header_name, result_of, termination_of

#: Why a game was not written. Every skipped game is counted under exactly one of these.
SKIP_REASONS: tuple[str, ...] = (
    "illegal_move",  # a move that is illegal or unparseable in its position
    "bad_fen",  # a FEN header that is not a position
    "non_standard_variant",  # Variant header other than standard chess
    "non_standard_start",  # a FEN/SetUp start other than the initial position
    "no_moves",  # no moves at all
    "too_short",  # fewer plies than min_plies
    "missing_elo",  # min_elo > 0 and a player's rating is missing
    "elo_below_min",  # a player's rating is below min_elo
    "time_control",  # category not in time_controls
    "termination",  # termination not in terminations
    "oversized",  # one game over max_game_bytes (a broken file, not a game)
)

MAX_GAME_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
_STANDARD_VARIANTS = frozenset(("", "standard", "chess", "normal", "from position", "fromposition"))
_START_EPD = chess.Board().epd()
_RESULT_TOKENS = frozenset((b"1-0", b"0-1", b"1/2-1/2", b"*"))


class PGNStreamError(Exception):
    """A compressed stream that cannot be read on (truncated or corrupt ``.zst``)."""


# ---------------------------------------------------------------------------------------------
# is this PGN at all? (a look at the start of a file, before anything reads it whole)

#: How much of a file :func:`check_pgn_start` looks at (decompressed, for ``.zst``).
SNIFF_BYTES = 64 * 1024
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SKIPPABLE = {bytes([b]) for b in range(0x50, 0x60)}  # zstd skippable frames: 0x184D2A5? little-endian
_SAN_OR_NUMBER = re.compile(
    rb"^(\d+\s*\.|1-0|0-1|1/2-1/2|\*|O-O(-O)?|[NBRQK]?[a-h]?[1-8]?x?[a-h][1-8](=?[NBRQ])?[+#]?)(\s|$|[!?{(;])"
)


class NotPGNError(ValueError):
    """A file whose start is not PGN (or, named ``.zst``, not zstd-compressed)."""


def check_pgn_start(stream: IO[bytes], name: str, size: int = SNIFF_BYTES) -> None:
    """Read the start of ``stream`` (a file called ``name``) and raise :class:`NotPGNError` when
    it is not PGN: binary data, or a first line that is no tag pair, comment, escape or movetext;
    or, for ``.zst``, no zstd frame. An empty file is PGN without games. Damage further into a
    zstd stream is left to the reader, which keeps the games before it (a truncated download).

    >>> check_pgn_start(io.BytesIO(b'\\xef\\xbb\\xbf[Event "A"]\\n'), "a.pgn")
    >>> check_pgn_start(io.BytesIO(b"1. e4 e5 *"), "a.pgn")
    >>> check_pgn_start(io.BytesIO(b"rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - bm e4;"), "a.pgn")
    Traceback (most recent call last):
    ...
    chessrl.data.pgn.NotPGNError: not PGN: it starts with 'rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - bm e4;' (PGN starts with tag pairs like [Event "..."] or movetext like 1. e4)
    """
    head = stream.read(size)
    if name.endswith(".zst"):
        if head and not (
            head.startswith(_ZSTD_MAGIC) or (head[:1] in _SKIPPABLE and head[1:4] == b"\x2a\x4d\x18")
        ):
            raise NotPGNError(
                "not zstd-compressed (no zstd frame at its start): name it .pgn if it is plain PGN"
            )
        try:
            head = (
                zstandard.ZstdDecompressor()
                .stream_reader(io.BytesIO(head), read_across_frames=True)
                .read(size)
            )
        except zstandard.ZstdError:
            return  # damaged inside the stream: the reader keeps what it can and lists the file
    head = head.removeprefix(_BOM)
    if b"\x00" in head:
        raise NotPGNError("not PGN: binary data (NUL bytes) where PGN text was expected")
    for line in head.splitlines():
        line = line.strip()
        if not line:
            continue
        if line[:1] in (b"[", b"{", b";", b"%") or _SAN_OR_NUMBER.match(line):
            return
        shown = line[:80].decode("utf-8", errors="replace")
        raise NotPGNError(
            f'not PGN: it starts with {shown!r} (PGN starts with tag pairs like [Event "..."] or movetext like 1. e4)'
        )


# ---------------------------------------------------------------------------------------------
# bytes -> raw games


def open_pgn(stream: IO[bytes], name: str) -> IO[bytes]:
    """Wrap ``stream`` so reading gives PGN bytes: ``.zst`` is decompressed on the fly.

    Decompression errors, and a stream that ends inside a zstd frame (a truncated download),
    surface as :class:`PGNStreamError` while reading.
    """
    if name.endswith(".zst"):
        return _ZstdReader(stream)  # type: ignore[return-value]
    return stream


class _ZstdReader:
    """Streaming zstd decoding that notices truncation (zstandard's stream_reader does not)."""

    def __init__(self, raw: IO[bytes], chunk_size: int = 1 << 20) -> None:
        self._raw = raw
        self._chunk_size = chunk_size
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._in_frame = False

    def read(self, size: int = -1) -> bytes:
        """The next decompressed piece (any length); ``b""`` at the clean end of the stream."""
        while True:
            data = self._raw.read(self._chunk_size)
            if not data:
                if self._in_frame:
                    raise PGNStreamError("truncated zstd stream: it ends inside a frame")
                return b""
            out = []
            while data:
                try:
                    out.append(self._obj.decompress(data))
                except zstandard.ZstdError as exc:
                    raise PGNStreamError(f"corrupt zstd data: {exc}") from None
                self._in_frame = True
                if self._obj.eof:  # frame done; the rest of ``data`` starts the next frame
                    data = self._obj.unused_data
                    self._obj = self._dctx.decompressobj()
                    self._in_frame = False
                else:
                    data = b""
            result = b"".join(out)
            if result:
                return result

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _ZstdReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _iter_lines(stream: IO[bytes], chunk_size: int, max_line: int) -> Iterator[bytes | None]:
    """Lines without their ``\\n``; ``None`` marks a line dropped for being over ``max_line``."""
    pending = b""
    dropping = False
    while True:
        chunk = stream.read(chunk_size)
        if not chunk:
            break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if dropping:
                dropping = False
                yield None
                continue
            yield line
        if len(pending) > max_line:
            pending = b""
            dropping = True
    if dropping:
        yield None
    elif pending:
        yield pending


def iter_raw_games(
    stream: IO[bytes], *, chunk_size: int = 1 << 20, max_game_bytes: int = MAX_GAME_BYTES
) -> Iterator[bytes]:
    """Split a PGN byte stream into one ``bytes`` per game (headers + movetext), streaming.

    A new game starts at a ``[`` line (outside a comment) once the current game has movetext, or
    at any line after a movetext line that ends in a result token, so blank lines inside headers,
    games without blank lines and games without headers all work. ``\\r\\n`` and a UTF-8
    BOM are handled. A game bigger than ``max_game_bytes`` is yielded as ``b""`` (count it as
    ``oversized``) instead of filling memory.
    """
    current: list[bytes] = []
    size = 0
    oversized = False
    seen_moves = False
    ended = False  # the current game's movetext has reached its result token
    depth = 0  # {comment} nesting
    for line in _iter_lines(stream, chunk_size, max_game_bytes):
        if line is None:
            oversized = True
            seen_moves = True
            continue
        if line.startswith(_BOM):  # start of a file, or of a file concatenated onto another
            line = line[3:]
        if line.endswith(b"\r"):
            line = line[:-1]
        stripped = line.strip()
        if (
            depth == 0
            and seen_moves
            and (stripped.startswith(b"[") or (ended and stripped and stripped[:1] not in b"{;%("))
        ):
            yield b"" if oversized else b"\n".join(current)
            current, size, oversized, seen_moves, ended = [], 0, False, False, False
        if not oversized:
            current.append(line)
            size += len(line) + 1
            if size > max_game_bytes:
                oversized, current = True, []
        if depth == 0 and (not stripped or stripped.startswith((b"[", b"%"))):
            continue
        if stripped:
            seen_moves = True
        if b"{" in line or b"}" in line or b";" in line:
            depth = _brace_depth(line, depth)
        # A termination marker ends the game: what follows is the next game, headers or not.
        ended = (
            depth == 0
            and bool(stripped)
            and b";" not in line
            and stripped.rsplit(None, 1)[-1] in _RESULT_TOKENS
        )
    if current or oversized:
        if oversized:
            yield b""
        elif any(part.strip() for part in current):
            yield b"\n".join(current)


def _brace_depth(line: bytes, depth: int) -> int:
    for byte in line:
        if byte == 0x7B:  # {
            depth = 1
        elif byte == 0x7D:  # }
            depth = 0
        elif byte == 0x3B and depth == 0:  # ; comment to end of line
            break
    return depth


def decode_game(raw: bytes) -> tuple[str, bool]:
    """Bytes -> text. UTF-8 first; otherwise Latin-1 (old PGN files), flagged as recoded."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("latin-1"), True


# ---------------------------------------------------------------------------------------------
# text -> parsed game


@dataclass
class ParsedGame:
    """What one game's text holds: headers, mainline in UCI, final position, first error."""

    headers: dict[str, str]
    moves: list[str]
    board: chess.Board | None
    error: str | None = None
    skip: str | None = None
    result: str = "*"

    @property
    def n_plies(self) -> int:
        return len(self.moves)


class _MainlineVisitor(chess.pgn.BaseVisitor[ParsedGame]):
    """Collects headers and the mainline; skips variations, comments and non-standard games."""

    def begin_game(self) -> None:
        self.game = ParsedGame(headers={}, moves=[], board=None)

    def visit_header(self, tagname: str, tagvalue: str) -> None:
        self.game.headers[tagname] = tagvalue

    def end_headers(self) -> Any:
        headers = self.game.headers
        variant = headers.get("Variant", "").strip().lower()
        if variant not in _STANDARD_VARIANTS:
            self.game.skip = "non_standard_variant"
            return chess.pgn.SKIP
        fen = headers.get("FEN")
        if fen and fen.strip() != chess.STARTING_FEN:
            try:
                board = chess.Board(fen)
            except ValueError:
                self.game.skip = "bad_fen"
                return chess.pgn.SKIP
            if board.epd() != _START_EPD:
                self.game.skip = "non_standard_start"
                return chess.pgn.SKIP
        return None

    def visit_board(self, board: chess.Board) -> None:
        if self.game.board is None:
            self.game.board = board  # the root board: every mainline move is pushed onto it

    def begin_variation(self) -> Any:
        return chess.pgn.SKIP

    def visit_move(self, board: chess.Board, move: chess.Move) -> None:
        if not move:  # python-chess reads "Z0"/"--" as a null move: not a legal chess game
            self.handle_error(ValueError(f"null move in the mainline after {len(self.game.moves)} plies"))
        self.game.moves.append(move.uci())

    def visit_result(self, result: str) -> None:
        self.game.result = result

    def handle_error(self, error: Exception) -> None:
        if str(error).startswith("unsupported variant") and (
            self.game.headers.get("Variant", "").strip().lower() in _STANDARD_VARIANTS
        ):
            return  # "FromPosition", " Standard ": names python-chess does not know, but standard chess
        if self.game.error is None:
            self.game.error = str(error)

    def result(self) -> ParsedGame:
        return self.game


def parse_game(text: str) -> ParsedGame:
    """Parse one game's PGN text (as split by :func:`iter_raw_games`)."""
    game = chess.pgn.read_game(io.StringIO(text), Visitor=_MainlineVisitor)
    if game is None:
        return ParsedGame(headers={}, moves=[], board=None, skip="no_moves")
    if game.skip is None and game.error is not None:
        game.skip = "illegal_move"
    return game


# ---------------------------------------------------------------------------------------------
# one game end to end, and the counts


@dataclass
class PrepareCounts:
    """What happened to the games of one or many batches; adds up with ``+``."""

    read: int = 0
    written: int = 0
    recoded_non_utf8: int = 0
    missing_headers: int = 0
    plies_written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    results: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # first message per skip reason
    file_errors: list[str] = field(default_factory=list)  # files that could not be read to the end

    def skip(self, reason: str, example: str | None = None) -> None:
        self.skipped[reason] += 1
        if example and reason not in self.examples:
            self.examples[reason] = example[:300]

    def stream_error(self, source: str, message: str) -> None:
        """A file that could not be read to its end (the games before the damage still count)."""
        self.file_errors.append(f"{source}: {message}")

    def __add__(self, other: PrepareCounts) -> PrepareCounts:
        examples = dict(other.examples)
        examples.update(self.examples)
        return PrepareCounts(
            read=self.read + other.read,
            written=self.written + other.written,
            recoded_non_utf8=self.recoded_non_utf8 + other.recoded_non_utf8,
            missing_headers=self.missing_headers + other.missing_headers,
            plies_written=self.plies_written + other.plies_written,
            skipped=self.skipped + other.skipped,
            results=self.results + other.results,
            examples=examples,
            file_errors=self.file_errors + other.file_errors,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "written": self.written,
            "recoded_non_utf8": self.recoded_non_utf8,
            "missing_headers": self.missing_headers,
            "plies_written": self.plies_written,
            "skipped": dict(sorted(self.skipped.items())),
            "results": dict(sorted(self.results.items())),
            "examples": dict(sorted(self.examples.items())),
            "file_errors": list(self.file_errors),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrepareCounts:
        return cls(
            read=int(data.get("read", 0)),
            written=int(data.get("written", 0)),
            recoded_non_utf8=int(data.get("recoded_non_utf8", 0)),
            missing_headers=int(data.get("missing_headers", 0)),
            plies_written=int(data.get("plies_written", 0)),
            skipped=Counter({k: int(v) for k, v in dict(data.get("skipped", {})).items()}),
            results=Counter({k: int(v) for k, v in dict(data.get("results", {})).items()}),
            examples=dict(data.get("examples", {})),
            file_errors=list(data.get("file_errors", [])),
        )


_ROSTER = ("Event", "Site", "Date", "Round", "White", "Black", "Result")


def game_record(raw: bytes, source: str, game_filter: GameFilter, counts: PrepareCounts) -> GameRecord | None:
    """One raw game -> a games-table row, or ``None`` with the reason counted in ``counts``."""
    counts.read += 1
    if not raw:
        counts.skip("oversized", f"a game in {source} is over {MAX_GAME_BYTES} bytes")
        return None
    text, recoded = decode_game(raw)
    counts.recoded_non_utf8 += int(recoded)
    parsed = parse_game(text)
    headers = parsed.headers
    if parsed.skip is not None:
        detail = parsed.error or headers.get("Variant") or headers.get("FEN")
        counts.skip(parsed.skip, f"{source}: {_describe(headers)}: {detail}")
        return None
    termination = termination_of(parsed.board, headers.get("Termination"))
    reason = game_filter.reason(headers, n_plies=parsed.n_plies, termination=termination)
    if reason is not None:
        counts.skip(reason)
        return None
    if not all(headers.get(tag) for tag in ("White", "Black", "Result")):
        counts.missing_headers += 1
    moves = " ".join(parsed.moves)
    result = result_of(parsed.board, headers.get("Result"), parsed.result)
    counts.written += 1
    counts.plies_written += parsed.n_plies
    counts.results[result] += 1
    return GameRecord(
        game_id=game_id_for({t: headers.get(t, "") for t in _ROSTER}, moves),
        source=source,
        white=header_name(headers.get("White")),
        black=header_name(headers.get("Black")),
        white_elo=header_elo(headers.get("WhiteElo")),
        black_elo=header_elo(headers.get("BlackElo")),
        result=result,
        termination=termination,
        eco=header_name(headers.get("ECO")),
        time_control=header_name(headers.get("TimeControl")),
        moves=moves,
        n_plies=parsed.n_plies,
    )


def _describe(headers: Mapping[str, str]) -> str:
    white, black = headers.get("White", "?"), headers.get("Black", "?")
    return f"{white} - {black} ({headers.get('Date', '?')})"


def game_records(
    raw_games: Iterable[bytes], source: str, game_filter: GameFilter, counts: PrepareCounts
) -> list[GameRecord]:
    """Many raw games -> rows (skips counted in ``counts``)."""
    out = []
    for raw in raw_games:
        record = game_record(raw, source, game_filter, counts)
        if record is not None:
            out.append(record)
    return out


def read_pgn_file(
    stream: IO[bytes], name: str, game_filter: GameFilter | None = None
) -> tuple[list[GameRecord], PrepareCounts]:
    """A whole (small) PGN file -> rows and counts, in this process. Used by tests and benches.

    A truncated or corrupt compressed stream keeps the games read before the damage and lists the
    file under ``counts.file_errors``.
    """
    counts = PrepareCounts()
    records: list[GameRecord] = []
    game_filter = game_filter or GameFilter()
    try:
        for raw in iter_raw_games(open_pgn(stream, name)):
            record = game_record(raw, name, game_filter, counts)
            if record is not None:
                records.append(record)
    except PGNStreamError as exc:
        counts.stream_error(name, str(exc))
    return records, counts
