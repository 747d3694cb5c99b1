"""chessrl.data.pgn: splitting byte streams into games, .zst streaming, parsing, classification, counts.

Everything is in memory and takes milliseconds, except the real-file checks at the bottom, which
read each file at most once (module-scoped fixtures).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import chess
import pytest
import zstandard

from chessrl.data.games import game_id_for
from chessrl.data.pgn import (
    MAX_GAME_BYTES,
    SKIP_REASONS,
    GameFilter,
    PGNStreamError,
    PrepareCounts,
    decode_game,
    game_record,
    game_records,
    iter_raw_games,
    open_pgn,
    parse_game,
    read_pgn_file,
    result_of,
    termination_of,
)
from chessrl.data.pgn_filters import TIME_CONTROL_CATEGORIES, time_control_category

PGN_DIR = Path(__file__).resolve().parents[1] / "data" / "pgn"
BOM = b"\xef\xbb\xbf"

GAME_A = b'[Event "A"]\n[White "Alice"]\n[Black "Bob"]\n[Result "1-0"]\n\n1. e4 e5 2. Nf3 1-0\n'
GAME_B = b'[Event "B"]\n[White "Carol"]\n[Black "Dave"]\n[Result "0-1"]\n\n1. d4 d5 0-1\n'


def split(data: bytes, **kwargs: int) -> list[bytes]:
    return list(iter_raw_games(io.BytesIO(data), **kwargs))


def events(raw_games: list[bytes]) -> list[str | None]:
    return [parse_game(decode_game(raw)[0]).headers.get("Event") for raw in raw_games]


def zst(*frames: bytes) -> bytes:
    """One zstd frame per argument, concatenated (what ``zstd a; zstd b; cat`` produces)."""
    return b"".join(zstandard.ZstdCompressor().compress(frame) for frame in frames)


class Trickle(io.RawIOBase):
    """A stream that hands out at most ``step`` bytes per read, like a slow socket."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = io.BytesIO(data)
        self._step = step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._data.read(self._step if size < 0 else min(size, self._step))


# ---------------------------------------------------------------------------------------------
# iter_raw_games


def test_games_without_blank_lines_between_them_are_split() -> None:
    data = b'[Event "A"]\n1. e4 *\n[Event "B"]\n1. d4 *\n[Event "C"]\n1. c4 *'
    raw = split(data)
    assert raw == [b'[Event "A"]\n1. e4 *', b'[Event "B"]\n1. d4 *', b'[Event "C"]\n1. c4 *']


def test_blank_lines_inside_the_headers_do_not_split_a_game() -> None:
    data = b'[Event "A"]\n\n[Date "2017.12.04"]\n\n[White "W"]\n\n1. e4 e5 *\n\n[Event "B"]\n\n1. d4 *\n'
    raw = split(data)
    assert len(raw) == 2
    game = parse_game(decode_game(raw[0])[0])
    assert game.headers == {"Event": "A", "Date": "2017.12.04", "White": "W"}
    assert game.moves == ["e2e4", "e7e5"]


def test_chessbase_file_with_a_blank_line_after_the_first_header_is_one_game() -> None:
    raw = split((PGN_DIR / "chessbase-empty-line.pgn").read_bytes())
    assert len(raw) == 1
    game = parse_game(decode_game(raw[0])[0])
    assert game.headers["Event"] == "AlphaZero vs. Stockfish"
    assert game.headers["Black"] == "AlphaZero"  # a header after the blank line is kept
    assert (game.n_plies, game.result, game.skip) == (134, "0-1", None)


def test_crlf_line_endings_are_removed() -> None:
    data = (GAME_A + b"\n" + GAME_B).replace(b"\n", b"\r\n")
    raw = split(data)
    assert len(raw) == 2
    assert all(b"\r" not in game for game in raw)
    assert parse_game(decode_game(raw[1])[0]).moves == ["d2d4", "d7d5"]


def test_utf8_bom_at_the_start_is_dropped() -> None:
    raw = split(BOM + GAME_A)
    assert raw[0].startswith(b'[Event "A"]')
    assert parse_game(decode_game(raw[0])[0]).headers["Event"] == "A"


def test_utf8_bom_file_from_the_test_data_has_two_games_and_no_bom() -> None:
    raw = split((PGN_DIR / "utf8-bom.pgn").read_bytes())
    assert events(raw) == ["A", "B"]
    assert all(BOM not in game for game in raw)


@pytest.mark.parametrize(
    "first",
    [GAME_A, b'[Event "A"]\n\n1. e4 e5 2. Nf3\n'],  # the second has no result token
    ids=["after-result", "after-movetext"],
)
def test_utf8_bom_before_a_later_game_starts_a_new_game(first: bytes) -> None:
    # `cat a.pgn b.pgn` where both files start with a BOM: the second game must not vanish.
    raw = split(first + b"\n" + BOM + GAME_B)
    assert events(raw) == ["A", "B"]
    assert all(BOM not in game for game in raw)


def test_games_without_headers_are_split_at_their_result_token() -> None:
    raw = split(b"1. e4 e5 1-0\n1. d4 d5 0-1\n1. c4 *\n")
    assert raw == [b"1. e4 e5 1-0", b"1. d4 d5 0-1", b"1. c4 *"]


def test_comment_after_the_result_token_is_not_a_game_of_its_own() -> None:
    # Only a '[' line or movetext may start the next game; a trailing remark must not be counted
    # as one more game read (and skipped as no_moves).
    data = b'[Event "A"]\n\n1. e4 e5 1-0\n{ annotator: a fine game }\n\n[Event "B"]\n\n1. d4 *\n'
    assert events(split(data)) == ["A", "B"]


@pytest.mark.parametrize(
    "movetext",
    [b"1. e4 {white won 1-0\n} e5 *", b"1. e4 ; the score: 1-0\ne5 *", b"1. e4 {\n*\n} e5 *"],
    ids=["brace-comment", "semicolon-comment", "star-in-comment"],
)
def test_result_token_inside_a_comment_does_not_end_the_game(movetext: bytes) -> None:
    raw = split(b'[Event "A"]\n\n' + movetext + b"\n" + GAME_B)
    assert events(raw) == ["A", "B"]
    assert parse_game(decode_game(raw[0])[0]).moves == ["e2e4", "e7e5"]


def test_brace_comment_spanning_lines_can_hold_a_line_starting_with_a_bracket() -> None:
    data = (
        b'[Event "A"]\n\n1. e4 {a long comment\n[%clk 0:03:00] and [more]\n} e5 *\n[Event "B"]\n\n1. d4 *\n'
    )
    raw = split(data)
    assert events(raw) == ["A", "B"]
    game = parse_game(decode_game(raw[0])[0])
    assert game.moves == ["e2e4", "e7e5"]


def test_semicolon_comment_hides_an_opening_brace() -> None:
    # '{' after ';' is part of the rest-of-line comment, so the next '[' line is a new game.
    data = b'[Event "A"]\n\n1. e4 ; a { that opens nothing\ne5 *\n[Event "B"]\n\n1. d4 *\n'
    raw = split(data)
    assert events(raw) == ["A", "B"]
    assert parse_game(decode_game(raw[0])[0]).moves == ["e2e4", "e7e5"]


def test_semicolon_inside_a_brace_comment_does_not_end_it() -> None:
    data = b'[Event "A"]\n\n1. e4 { one ; two\n[not a header] } e5 *\n[Event "B"]\n\n1. d4 *\n'
    assert events(split(data)) == ["A", "B"]


def test_percent_escape_line_between_headers_is_not_movetext() -> None:
    data = b'[Event "A"]\n% an escaped line\n[Site "x"]\n\n1. e4 *\n'
    raw = split(data)
    assert len(raw) == 1
    assert parse_game(decode_game(raw[0])[0]).headers == {"Event": "A", "Site": "x"}


@pytest.mark.parametrize("chunk_size", [1, 2, 7, 64, 1 << 20])
def test_splitting_does_not_depend_on_the_chunk_size(chunk_size: int) -> None:
    data = BOM + (GAME_A + b"\n" + b'[Event "C"]\n\n1. e4 {x\n[y]} e5 *\n' + GAME_B).replace(b"\n", b"\r\n")
    assert split(data, chunk_size=chunk_size) == split(data)
    assert events(split(data, chunk_size=chunk_size)) == ["A", "C", "B"]


def test_last_game_without_a_final_newline_is_kept() -> None:
    assert split(GAME_A.rstrip(b"\n")) == [GAME_A.rstrip(b"\n")]


@pytest.mark.parametrize("data", [b"", b"\n", b"\n \n\t\n", BOM, BOM + b"\r\n\r\n"])
def test_empty_input_gives_no_games(data: bytes) -> None:
    assert split(data) == []


@pytest.mark.parametrize("chunk_size", [5, 1 << 20])
def test_oversized_game_comes_out_as_empty_bytes_between_intact_neighbours(chunk_size: int) -> None:
    big = b'[Event "Big"]\n\n1. e4 ' + b"e5 Nf3 Nc6 " * 40 + b"*\n"
    raw = split(GAME_A + big + GAME_B, max_game_bytes=120, chunk_size=chunk_size)
    assert raw == [GAME_A.rstrip(b"\n"), b"", GAME_B.rstrip(b"\n")]


@pytest.mark.parametrize("chunk_size", [3, 50])
def test_one_line_longer_than_max_game_bytes_is_dropped_not_buffered(chunk_size: int) -> None:
    big = b'[Event "Big"]\n\n' + b"1. e4 {" + b"x" * 1000 + b"} e5 *\n"
    raw = split(GAME_A + big + GAME_B, max_game_bytes=100, chunk_size=chunk_size)
    assert raw == [GAME_A.rstrip(b"\n"), b"", GAME_B.rstrip(b"\n")]


def test_oversized_last_game_is_still_reported() -> None:
    assert split(GAME_A + b"1. e4 " + b"e5 " * 100, max_game_bytes=80) == [b""]


# ---------------------------------------------------------------------------------------------
# open_pgn and .zst


def test_open_pgn_passes_plain_files_through_untouched() -> None:
    stream = io.BytesIO(GAME_A)
    assert open_pgn(stream, "games.pgn") is stream


def test_zst_with_several_frames_reads_as_one_stream() -> None:
    # A frame boundary in the middle of a line and of a game must not matter.
    data = zst(GAME_A[:17], GAME_A[17:] + b"\n" + GAME_B[:30], GAME_B[30:])
    assert split(open_pgn(io.BytesIO(data), "x.pgn.zst").read()) == split(GAME_A + b"\n" + GAME_B)
    raw = list(iter_raw_games(open_pgn(io.BytesIO(data), "x.pgn.zst")))
    assert events(raw) == ["A", "B"]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_zst_frames_arriving_a_few_bytes_at_a_time(step: int) -> None:
    data = zst(GAME_A, GAME_B)
    raw = list(iter_raw_games(open_pgn(Trickle(data, step), "x.pgn.zst")))
    assert events(raw) == ["A", "B"]


def test_empty_zst_file_has_no_games_and_no_error() -> None:
    assert list(iter_raw_games(open_pgn(io.BytesIO(b""), "x.pgn.zst"))) == []


def test_truncated_zst_raises_while_reading_after_the_complete_games() -> None:
    game_c = GAME_A.replace(b'"A"', b'"C"')
    data = zst(GAME_A, GAME_B, game_c)
    cut = data[: len(zst(GAME_A, GAME_B)) + 5]  # inside the third frame's header
    stream = open_pgn(io.BytesIO(cut), "x.pgn.zst")  # opening reads nothing yet
    seen: list[bytes] = []
    with pytest.raises(PGNStreamError, match="^truncated zstd stream: it ends inside a frame$"):
        for raw in iter_raw_games(stream):
            seen.append(raw)
    assert events(seen)[:1] == ["A"]
    assert "C" not in events(seen)


def test_truncated_zst_reader_gives_the_complete_frames_then_raises() -> None:
    data = zst(GAME_A, GAME_B)
    reader = open_pgn(io.BytesIO(data[: len(zst(GAME_A)) + 2]), "x.pgn.zst")
    assert reader.read() == GAME_A
    with pytest.raises(PGNStreamError, match="truncated"):
        reader.read()


@pytest.mark.parametrize("garbage", [b"this is not zstd at all\n", b"ab", b"\x00" * 64])
def test_garbage_zst_is_a_stream_error(garbage: bytes) -> None:
    stream = open_pgn(io.BytesIO(garbage), "x.pgn.zst")
    with pytest.raises(PGNStreamError, match="corrupt zstd data"):
        list(iter_raw_games(stream))


def test_garbage_after_a_good_frame_is_a_stream_error() -> None:
    stream = open_pgn(io.BytesIO(zst(GAME_A) + b"junk!"), "x.pgn.zst")
    with pytest.raises(PGNStreamError, match="corrupt zstd data"):
        list(iter_raw_games(stream))


# ---------------------------------------------------------------------------------------------
# decode_game


def test_decode_utf8_is_not_flagged() -> None:
    assert decode_game('[White "Müller"]'.encode()) == ('[White "Müller"]', False)


def test_decode_falls_back_to_latin1_and_flags_it() -> None:
    assert decode_game(b'[White "M\xfcller"]') == ('[White "Müller"]', True)


# ---------------------------------------------------------------------------------------------
# parse_game


def moves_of(text: str) -> list[str]:
    game = parse_game(text)
    assert (game.skip, game.error) == (None, None), (game.skip, game.error)
    return game.moves


def test_mainline_comes_out_in_uci_with_variations_comments_and_nags_skipped() -> None:
    text = "1. e4 $1 {best by test} e5!? 2. Nf3 (2. f4 exf4 (2... d5)) Nc6 ; rest of line\n3. Bb5 *"
    assert moves_of(text) == ["e2e4", "e7e5", "g1f3", "b8c6", "f1b5"]


def test_castling_both_sides_is_king_to_its_square() -> None:
    assert moves_of("1. e4 e5 2. Nf3 Nf6 3. Bc4 Bc5 4. O-O O-O *")[-2:] == ["e1g1", "e8g8"]
    assert moves_of("1. d4 d5 2. Nc3 Nc6 3. Bf4 Bf5 4. Qd2 Qd7 5. O-O-O O-O-O *")[-2:] == ["e1c1", "e8c8"]


def test_castling_written_with_zeros_is_accepted() -> None:
    assert moves_of("1. e4 e5 2. Nf3 Nf6 3. Bc4 Bc5 4. 0-0 0-0 *")[-2:] == ["e1g1", "e8g8"]


def test_promotions_carry_the_piece_letter() -> None:
    assert moves_of("1. d4 e5 2. dxe5 f6 3. exf6 Nh6 4. fxg7 Bc5 5. gxh8=Q+ *")[-1] == "g7h8q"
    # Lasker trap: an underpromotion to a knight with check.
    text = "1. d4 d5 2. c4 e5 3. dxe5 d4 4. e3 Bb4+ 5. Bd2 dxe3 6. Bxb4 exf2+ 7. Ke2 fxg1=N+ *"
    assert moves_of(text)[-1] == "f2g1n"


def test_en_passant_is_the_pawn_move_and_removes_the_captured_pawn() -> None:
    game = parse_game("1. e4 Nf6 2. e5 d5 3. exd6 *")
    assert game.moves[-1] == "e5d6"
    assert game.board is not None
    assert game.board.piece_at(chess.D5) is None
    assert game.board.piece_at(chess.D6) == chess.Piece(chess.PAWN, chess.WHITE)


def test_illegal_move_is_skipped_with_the_python_chess_message() -> None:
    game = parse_game('[Event "A"]\n\n1. e4 e5 2. Ke3 Nc6 *')
    assert game.skip == "illegal_move"
    assert game.error == "illegal san: 'Ke3' in rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2"
    assert game.moves == ["e2e4", "e7e5"]  # what came before the bad move


def test_move_of_the_wrong_side_is_illegal() -> None:
    game = parse_game("1. e4 e5 2. e2e4 *")
    assert game.skip == "illegal_move"
    assert game.error is not None and "e2e4" in game.error


@pytest.mark.parametrize("null", ["Z0", "--"])
def test_null_move_in_the_mainline_is_not_a_legal_game(null: str) -> None:
    # ChessBase writes analysis null moves as Z0; a game with one is not a game of chess, and the
    # games table promises legal UCI moves (``0000`` is not one).
    game = parse_game(f"1. e4 {null} 2. d4 *")
    assert game.skip == "illegal_move"


def test_uci_movetext_is_read() -> None:
    game = parse_game((PGN_DIR / "uci-moves.pgn").read_text())
    assert game.moves[:4] == ["g1f3", "c7c5", "e2e4", "d7d6"]
    assert (game.n_plies, game.result, game.skip) == (113, "1/2-1/2", None)


def test_movetext_result_and_final_board() -> None:
    game = parse_game("1. f3 e5 2. g4 Qh4# 0-1")
    assert game.result == "0-1"
    assert game.board is not None and game.board.is_checkmate()


def test_headers_with_a_result_but_no_moves() -> None:
    game = parse_game('[Event "x"]\n[Result "1-0"]\n\n1-0')
    assert (game.moves, game.skip, game.result) == ([], None, "1-0")


def test_empty_text_is_no_moves() -> None:
    assert parse_game("").skip == "no_moves"


def test_fen_header_with_another_start_is_non_standard_start() -> None:
    game = parse_game('[SetUp "1"]\n[FEN "8/8/8/8/8/8/8/K6k w - - 0 1"]\n\n1. Kb1 *')
    assert (game.skip, game.moves, game.error) == ("non_standard_start", [], None)


def test_fen_header_of_the_initial_position_is_a_standard_game() -> None:
    text = f'[SetUp "1"]\n[FEN "{chess.STARTING_FEN}"]\n\n1. e4 *'
    assert moves_of(text) == ["e2e4"]


def test_fen_header_of_the_initial_position_without_move_counters_is_a_standard_game() -> None:
    # Same position, counters left out (python-chess accepts it): not a "non standard start".
    text = '[SetUp "1"]\n[FEN "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -"]\n\n1. e4 *'
    game = parse_game(text)
    assert (game.skip, game.moves) == (None, ["e2e4"])


@pytest.mark.parametrize(
    "fen",
    [
        "not a fen",
        "rnbqkbnr/pppppppp/8/8 w",  # four ranks
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR x KQkq - 0 1",  # side to move 'x'
        "rnbqkbnr/pppppppp/9/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",  # nine files
    ],
)
def test_fen_header_that_is_not_a_position_is_bad_fen(fen: str) -> None:
    game = parse_game(f'[FEN "{fen}"]\n\n1. e4 *')
    assert (game.skip, game.moves) == ("bad_fen", [])


@pytest.mark.parametrize("variant", ["Atomic", "Chess960", "Crazyhouse", "King of the Hill"])
def test_variant_header_other_than_standard_is_skipped(variant: str) -> None:
    game = parse_game(f'[Variant "{variant}"]\n\n1. e4 *')
    assert (game.skip, game.moves) == ("non_standard_variant", [])


@pytest.mark.parametrize(
    "variant", ["Standard", "standard", "Chess", "normal", "From Position", "FromPosition", "fromposition"]
)
def test_variant_header_naming_standard_chess_is_kept(variant: str) -> None:
    assert moves_of(f'[Variant "{variant}"]\n\n1. e4 *') == ["e2e4"]


# ---------------------------------------------------------------------------------------------
# time_control_category, termination_of, result_of


@pytest.mark.parametrize(
    ("tc", "category"),
    [
        ("15+0", "ultrabullet"),
        ("29+0", "ultrabullet"),
        ("30+0", "bullet"),  # 30 s is no longer ultrabullet
        ("0+1", "bullet"),  # 0 + 40 * 1 = 40 s
        ("60+0", "bullet"),
        ("179+0", "bullet"),
        ("180+0", "blitz"),
        ("120+2", "blitz"),  # 120 + 80 = 200 s
        ("479+0", "blitz"),
        ("480+0", "rapid"),
        ("600+5", "rapid"),
        ("1499+0", "rapid"),
        ("1500+0", "classical"),
        ("1800+20", "classical"),
        (" 300+3 ", "blitz"),
        ("300", "blitz"),
        ("180+", "blitz"),
        ("-", "correspondence"),
        ("?", "unknown"),
        ("", "unknown"),
        (None, "unknown"),
        ("fast", "unknown"),
        ("+5", "unknown"),
        ("40/7200:20/3600:900+30", "unknown"),
    ],
)
def test_time_control_category(tc: str | None, category: str) -> None:
    assert time_control_category(tc) == category
    assert category in TIME_CONTROL_CATEGORIES


MATE = chess.Board("7k/6Q1/6K1/8/8/8/8/8 b - - 0 1")


@pytest.mark.parametrize(
    ("board", "header", "termination"),
    [
        (MATE, "Normal", "checkmate"),  # the position wins over the header
        (MATE, "Time forfeit", "checkmate"),
        (chess.Board("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1"), None, "stalemate"),
        (chess.Board("8/8/8/8/8/8/8/K6k w - - 0 1"), "Normal", "insufficient_material"),
        (chess.Board("7k/8/8/8/8/8/8/K6R w - - 150 100"), None, "seventyfive_moves"),
        (chess.Board(), "Time forfeit", "time_forfeit"),
        (chess.Board(), "Rules infraction", "rules_infraction"),
        (chess.Board(), "time-forfeit", "time_forfeit"),
        (chess.Board(), "  Abandoned ", "abandoned"),
        (chess.Board(), "?", "unknown"),
        (chess.Board(), "", "unknown"),
        (chess.Board(), None, "unknown"),
        (None, "Normal", "normal"),
        (None, None, "unknown"),
    ],
)
def test_termination_of(board: chess.Board | None, header: str | None, termination: str) -> None:
    assert termination_of(board, header) == termination


def test_fivefold_repetition_ends_the_game_but_threefold_needs_a_claim() -> None:
    board = chess.Board()
    for move in ["g1f3", "g8f6", "f3g1", "f6g8"] * 2:
        board.push_uci(move)
    assert termination_of(board, "Normal") == "normal"  # threefold: only claimable
    for move in ["g1f3", "g8f6", "f3g1", "f6g8"] * 2:
        board.push_uci(move)
    assert termination_of(board, "Normal") == "fivefold_repetition"


@pytest.mark.parametrize(
    ("board", "header", "movetext", "result"),
    [
        (chess.Board(), "1-0", "0-1", "1-0"),  # the header wins
        (chess.Board(), "*", "0-1", "0-1"),
        (chess.Board(), "?", "1/2-1/2", "1/2-1/2"),
        (chess.Board(), None, "*", "*"),
        (MATE, None, "*", "1-0"),  # from the final position
        (MATE, "*", "*", "1-0"),
        (chess.Board("8/8/8/8/8/8/8/K6k w - - 0 1"), None, "*", "1/2-1/2"),
        (None, None, "*", "*"),
    ],
)
def test_result_of(board: chess.Board | None, header: str | None, movetext: str, result: str) -> None:
    assert result_of(board, header, movetext) == result


# ---------------------------------------------------------------------------------------------
# GameFilter


RATED = {"WhiteElo": "2100", "BlackElo": "2050", "TimeControl": "180+2"}


def test_default_filter_keeps_any_legal_game_with_moves() -> None:
    assert GameFilter().reason({}, n_plies=1, termination="unknown") is None
    assert GameFilter().reason({}, n_plies=0, termination="unknown") == "no_moves"


@pytest.mark.parametrize(
    ("game_filter", "headers", "n_plies", "termination", "reason"),
    [
        (GameFilter(min_plies=0), RATED, 0, "normal", "no_moves"),  # no moves beats min_plies=0
        (GameFilter(min_plies=10), RATED, 9, "normal", "too_short"),
        (GameFilter(min_plies=10), RATED, 10, "normal", None),
        (GameFilter(min_elo=2000), {"WhiteElo": "2100"}, 40, "normal", "missing_elo"),
        (GameFilter(min_elo=2000), {"WhiteElo": "2100", "BlackElo": "?"}, 40, "normal", "missing_elo"),
        (GameFilter(min_elo=2000), {"WhiteElo": "2100", "BlackElo": "0"}, 40, "normal", "missing_elo"),
        (GameFilter(min_elo=2000), {"WhiteElo": "2100", "BlackElo": "2k"}, 40, "normal", "missing_elo"),
        (GameFilter(min_elo=2000), {"WhiteElo": "2100", "BlackElo": "1999"}, 40, "normal", "elo_below_min"),
        (GameFilter(min_elo=2000), {"WhiteElo": "1999", "BlackElo": "2100"}, 40, "normal", "elo_below_min"),
        (GameFilter(min_elo=2000), {"WhiteElo": " 2000 ", "BlackElo": "2000"}, 40, "normal", None),
        (GameFilter(min_elo=0), {"WhiteElo": "?"}, 40, "normal", None),  # 0: no rating needed
        (GameFilter(time_controls=("rapid",)), RATED, 40, "normal", "time_control"),
        (GameFilter(time_controls=("blitz", "rapid")), RATED, 40, "normal", None),
        (GameFilter(time_controls=("unknown",)), {}, 40, "normal", None),
        (GameFilter(terminations=("checkmate",)), RATED, 40, "time_forfeit", "termination"),
        (GameFilter(terminations=("checkmate", "normal")), RATED, 40, "normal", None),
    ],
)
def test_filter_reason(
    game_filter: GameFilter, headers: dict[str, str], n_plies: int, termination: str, reason: str | None
) -> None:
    assert game_filter.reason(headers, n_plies=n_plies, termination=termination) == reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_elo": -1}, "min_elo must be >= 0, got -1"),
        ({"min_plies": -5}, "min_plies must be >= 0, got -5"),
        (
            {"time_controls": ("blitz", "fast")},
            "unknown time control 'fast'; allowed: ultrabullet, bullet, blitz, rapid, classical, "
            "correspondence, unknown",
        ),
    ],
)
def test_invalid_filter_is_a_value_error_quoting_the_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        GameFilter(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


# ---------------------------------------------------------------------------------------------
# game_record and PrepareCounts


def pgn(moves: str, **headers: str) -> bytes:
    tags = {"Event": "E", "Site": "S", "Date": "2020.01.01", "Round": "1", "White": "W", "Black": "B"}
    tags.update(headers)
    return ("".join(f'[{k} "{v}"]\n' for k, v in tags.items()) + "\n" + moves + "\n").encode("utf-8")


def test_game_record_fills_every_column() -> None:
    raw = pgn(
        "1. f3 e5 2. g4 Qh4# 0-1",
        Result="0-1",
        White="Fool, A.",
        Black="?",
        WhiteElo="1500",
        BlackElo="?",
        ECO="C00",
        TimeControl="300+3",
        Termination="Normal",
    )
    counts = PrepareCounts()
    record = game_record(raw, "in/fools.pgn", GameFilter(), counts)
    assert record is not None
    roster = {"Event": "E", "Site": "S", "Date": "2020.01.01", "Round": "1"}
    roster.update({"White": "Fool, A.", "Black": "?", "Result": "0-1"})
    assert record.game_id == game_id_for(roster, "f2f3 e7e5 g2g4 d8h4")
    assert record.source == "in/fools.pgn"
    assert (record.white, record.black) == ("Fool, A.", None)
    assert (record.white_elo, record.black_elo) == (1500, None)
    assert (record.result, record.termination) == ("0-1", "checkmate")
    assert (record.eco, record.time_control) == ("C00", "300+3")
    assert (record.moves, record.n_plies) == ("f2f3 e7e5 g2g4 d8h4", 4)
    assert counts.as_dict() == PrepareCounts(read=1, written=1, plies_written=4).as_dict() | {
        "results": {"0-1": 1}
    }


def test_game_record_takes_the_result_from_the_position_when_headers_lack_it() -> None:
    counts = PrepareCounts()
    record = game_record(pgn("1. f3 e5 2. g4 Qh4# *"), "x", GameFilter(), counts)
    assert record is not None and record.result == "0-1"
    assert counts.missing_headers == 1  # no Result header


def test_game_record_counts_latin1_games_and_decodes_names() -> None:
    raw = pgn("1. e4 *", White="M\u00fcller", Result="*").decode("utf-8").encode("latin-1")
    counts = PrepareCounts()
    record = game_record(raw, "old.pgn", GameFilter(), counts)
    assert record is not None and record.white == "Müller"
    assert counts.recoded_non_utf8 == 1


def test_counts_add_up_over_a_mixed_batch() -> None:
    batch = [
        pgn("1. e4 e5 2. Nf3 Nc6 1-0", Result="1-0"),  # written
        pgn("1. d4 d5 1/2-1/2", Result="1/2-1/2"),  # written
        pgn("1. e4 e5 2. Ke3 *", Result="*"),  # illegal_move
        b'[Variant "Atomic"]\n\n1. e4 *\n',  # non_standard_variant
        b'[FEN "8/8/8/8/8/8/8/K6k w - - 0 1"]\n\n1. Kb1 *\n',  # non_standard_start
        b'[FEN "nonsense"]\n\n1. e4 *\n',  # bad_fen
        pgn("1-0", Result="1-0"),  # no_moves
        pgn("1. e4 *", Result="*"),  # too_short (min_plies=2)
        b"",  # oversized
    ]
    counts = PrepareCounts()
    records = game_records(batch, "mixed.pgn", GameFilter(min_plies=2), counts)
    assert [r.moves for r in records] == ["e2e4 e7e5 g1f3 b8c6", "d2d4 d7d5"]
    assert counts.read == len(batch)
    assert counts.read == counts.written + sum(counts.skipped.values())
    assert dict(counts.skipped) == {
        "illegal_move": 1,
        "non_standard_variant": 1,
        "non_standard_start": 1,
        "bad_fen": 1,
        "no_moves": 1,
        "too_short": 1,
        "oversized": 1,
    }
    assert set(counts.skipped) <= set(SKIP_REASONS)
    assert (counts.written, counts.plies_written) == (2, 6)
    assert dict(counts.results) == {"1-0": 1, "1/2-1/2": 1}
    assert counts.examples["illegal_move"] == (
        "mixed.pgn: W - B (2020.01.01): illegal san: 'Ke3' in "
        "rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2"
    )
    assert counts.examples["non_standard_variant"] == "mixed.pgn: ? - ? (?): Atomic"
    assert counts.examples["bad_fen"] == "mixed.pgn: ? - ? (?): nonsense"
    assert counts.examples["oversized"] == f"a game in mixed.pgn is over {MAX_GAME_BYTES} bytes"
    assert "too_short" not in counts.examples  # filter reasons carry no example


def test_first_example_per_reason_is_kept_and_cut_to_300_chars() -> None:
    counts = PrepareCounts()
    counts.skip("bad_fen", "x" * 1000)
    counts.skip("bad_fen", "second")
    assert counts.examples == {"bad_fen": "x" * 300}
    assert counts.skipped["bad_fen"] == 2


def test_stream_error_names_the_file_and_skips_no_game() -> None:
    counts = PrepareCounts()
    counts.stream_error("a.pgn.zst", "truncated zstd stream")
    assert counts.file_errors == ["a.pgn.zst: truncated zstd stream"]
    assert counts.skipped == {} and counts.read == 0


def sample_counts(tag: str, n: int) -> PrepareCounts:
    counts = PrepareCounts(read=n, written=n - 1, recoded_non_utf8=1, missing_headers=2, plies_written=10 * n)
    counts.skip("illegal_move", f"{tag}: illegal")
    counts.results["1-0"] += n - 1
    counts.file_errors.append(f"{tag}.pgn.zst: truncated")
    return counts


def test_counts_add_with_plus_without_touching_either_side() -> None:
    left, right = sample_counts("left", 5), sample_counts("right", 3)
    right.skip("bad_fen", "right: bad")
    before = (left.as_dict(), right.as_dict())
    total = left + right
    assert (left.as_dict(), right.as_dict()) == before
    assert (total.read, total.written, total.recoded_non_utf8) == (8, 6, 2)
    assert (total.missing_headers, total.plies_written) == (4, 80)
    assert dict(total.skipped) == {"illegal_move": 2, "bad_fen": 1}
    assert dict(total.results) == {"1-0": 6}
    assert total.examples == {"illegal_move": "left: illegal", "bad_fen": "right: bad"}  # first wins
    assert total.file_errors == ["left.pgn.zst: truncated", "right.pgn.zst: truncated"]
    assert (PrepareCounts() + left).as_dict() == left.as_dict()


def test_counts_round_trip_through_a_dict_and_json() -> None:
    counts = sample_counts("x", 4)
    counts.skip("bad_fen", "bad")
    data = json.loads(json.dumps(counts.as_dict()))
    again = PrepareCounts.from_dict(data)
    assert again == counts
    assert again.as_dict() == counts.as_dict()
    assert list(data["skipped"]) == ["bad_fen", "illegal_move"]  # sorted for stable summaries
    assert PrepareCounts.from_dict({}) == PrepareCounts()


# ---------------------------------------------------------------------------------------------
# read_pgn_file on the real test data


def read(path: Path, game_filter: GameFilter | None = None) -> tuple[list, PrepareCounts]:
    with path.open("rb") as stream:
        return read_pgn_file(stream, path.name, game_filter)


def test_kasparov_deep_blue_1997_has_six_games() -> None:
    records, counts = read(PGN_DIR / "kasparov-deep-blue-1997.pgn")
    assert (counts.read, counts.written, dict(counts.skipped), counts.file_errors) == (6, 6, {}, [])
    assert [r.white for r in records[:2]] == ["Garry Kasparov", "Deep Blue (Computer)"]
    assert dict(counts.results) == {"1-0": 3, "1/2-1/2": 3}
    assert records[0].moves.startswith("g1f3 d7d5 g2g3 c8g4")
    assert (records[0].white_elo, records[0].source) == (None, "kasparov-deep-blue-1997.pgn")
    assert len({r.game_id for r in records}) == 6


def test_kasparov_deep_blue_games_have_no_ratings_so_min_elo_drops_them() -> None:
    records, counts = read(PGN_DIR / "kasparov-deep-blue-1997.pgn", GameFilter(min_elo=1))
    assert (records, dict(counts.skipped)) == ([], {"missing_elo": 6})


def test_real_edge_case_files() -> None:
    records, counts = read(PGN_DIR / "molinari-bordais-1979.pgn")
    assert [(r.moves.split()[-1], r.result, r.termination) for r in records] == [("b4d3", "0-1", "checkmate")]
    records, counts = read(PGN_DIR / "utf8-bom.pgn")
    assert (counts.read, dict(counts.skipped)) == (2, {"no_moves": 2})


@pytest.fixture(scope="module")
def lichess() -> tuple[list, PrepareCounts]:
    return read(PGN_DIR / "lichess-2021-10-sample.pgn")


def test_lichess_sample_reads_999_games_and_the_counts_add_up(lichess: tuple[list, PrepareCounts]) -> None:
    records, counts = lichess
    assert counts.read == 999
    assert counts.read == counts.written + sum(counts.skipped.values())
    assert len(records) == counts.written
    assert counts.file_errors == []
    assert set(counts.skipped) <= set(SKIP_REASONS)
    assert sum(counts.results.values()) == counts.written
    assert counts.plies_written == sum(r.n_plies for r in records)
    assert all(r.time_control is not None and r.white_elo is not None for r in records)


@pytest.mark.parametrize(("name", "games"), [("Ding.pgn.zst", 1746), ("Firouzja.pgn.zst", 1876)])
def test_masters_zst_files_decompress_to_the_end(name: str, games: int) -> None:
    # Splitting reads the whole file (parsing all of it would take seconds).
    with (PGN_DIR / "masters" / name).open("rb") as stream:
        raw = list(iter_raw_games(open_pgn(stream, name)))
    assert len(raw) == games
    assert b"" not in raw
    last = parse_game(decode_game(raw[-1])[0])
    assert (last.skip, last.result in ("1-0", "0-1", "1/2-1/2")) == (None, True)


def test_truncated_masters_file_keeps_the_games_before_the_cut_and_records_the_error() -> None:
    data = (PGN_DIR / "masters" / "Ding.pgn.zst").read_bytes()
    cut = data[: len(data) // 20]
    records, counts = read_pgn_file(io.BytesIO(cut), "Ding.pgn.zst")
    assert counts.file_errors == ["Ding.pgn.zst: truncated zstd stream: it ends inside a frame"]
    assert "truncated" not in counts.skipped
    assert len(records) > 10
    # The same games, in the same order, as reading the intact file.
    with (PGN_DIR / "masters" / "Ding.pgn.zst").open("rb") as stream:
        raw = iter_raw_games(open_pgn(stream, "Ding.pgn.zst"))
        first = [next(raw) for _ in range(counts.read)]
    assert records == game_records(first, "Ding.pgn.zst", GameFilter(), PrepareCounts())


def test_garbage_zst_file_reads_no_games_and_records_the_error() -> None:
    records, counts = read_pgn_file(io.BytesIO(b"definitely not zstd"), "bad.pgn.zst")
    assert (records, counts.read, dict(counts.skipped)) == ([], 0, {})
    assert counts.file_errors == [
        "bad.pgn.zst: corrupt zstd data: zstd decompressor error: Unknown frame descriptor"
    ]


def test_counts_add_up_even_when_a_file_is_truncated() -> None:
    # The summary prints "read N, written W, skipped S": a damaged file is listed under
    # file_errors, not counted as a skipped game, so read = written + skipped holds.
    data = zst(GAME_A, GAME_B, GAME_A.replace(b'"A"', b'"C"'))
    records, counts = read_pgn_file(io.BytesIO(data[:-4]), "cut.pgn.zst")
    assert counts.file_errors and "truncated" not in counts.skipped
    assert counts.read == counts.written + sum(counts.skipped.values())
