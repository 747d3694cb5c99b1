"""native_board against python-chess, the reference: legal moves, children, end-of-game values,
repetition keys and the input planes' fields agree on every position of seeded random games
(uniform, capture-hungry, and shuffling ones that repeat and run into the fifty-move rule) and on
tricky positions (castling, en passant with pins and checks, promotions, mates, clocks, material);
and rust_chess's traps stay avoided (in a subprocess where one would abort the interpreter)."""

from __future__ import annotations

import doctest
import random
import subprocess
import sys
from dataclasses import dataclass, field

import chess
import chess.variant
import numpy as np
import pytest
import rust_chess

from chessrl.search import native_board as nb
from chessrl.search.board_encoding import encode_boards
from chessrl.search.search_board import terminal_value as reference_terminal_value


@dataclass
class Position:
    board: chess.Board  # a copy without the move stack
    rb: rust_chess.Board
    legal: list[int]  # python-chess's legal moves as codes
    key: object  # python-chess's _transposition_key
    terminal: float | None  # search_board.terminal_value on the board with its history
    path_keys: list[int]  # repetition_key of every position of the game so far, this one last


@dataclass
class Game:
    name: str
    positions: list[Position] = field(default_factory=list)
    moves: list[int] = field(default_factory=list)  # codes of the moves played


_KIND_PIECE = (None, chess.QUEEN, chess.ROOK, chess.BISHOP, chess.KNIGHT)


def _position(board: chess.Board, rb: rust_chess.Board, moves: list[chess.Move], keys: list[int]) -> Position:
    return Position(
        board.copy(stack=False),
        rb,
        sorted(nb.code_of_move(m) for m in moves),
        board._transposition_key(),
        reference_terminal_value(board),
        list(keys),
    )


def move_of(code: int) -> chess.Move:
    return chess.Move(code % 4096 // 64, code % 64, _KIND_PIECE[code // 4096])


def _reverse_of_last(board: chess.Board) -> chess.Move | None:
    """The move undoing the side to move's last move, if it is legal now."""
    if len(board.move_stack) < 2:
        return None
    last = board.move_stack[-2]
    back = chess.Move(last.to_square, last.from_square)
    return back if board.is_legal(back) and not board.is_zeroing(back) else None


def play(name: str, rng: random.Random, style: str, fen: str | None = None, plies: int = 200) -> Game:
    """A game of ``style`` (uniform, captures, shuffle) to its end or ``plies`` plies, draws by
    rule ignored (so repetitions pile up and clocks pass 100), both boards side by side."""
    board = chess.Board(fen) if fen else chess.Board()
    rb = nb.from_board(board)
    game = Game(name)
    keys = [nb.repetition_key(rb)]
    while True:
        moves = list(board.legal_moves)
        game.positions.append(_position(board, rb, moves, keys))
        if not moves or len(game.moves) >= plies:
            return game
        move = None
        if style == "captures":
            captures = [m for m in moves if board.is_capture(m)]
            if captures and rng.random() < 0.7:
                move = rng.choice(captures)
        elif style == "shuffle":
            quiet = [m for m in moves if not board.is_zeroing(m)]
            move = _reverse_of_last(board) if rng.random() < 0.6 else None
            if move is None and quiet and rng.random() < 0.95:
                move = rng.choice(quiet)
        move = move or rng.choice(moves)
        board.push(move)
        code = nb.code_of_move(move)
        game.moves.append(code)
        rb = nb.child(rb, code)
        keys.append(nb.repetition_key(rb))


# (name, FEN, moves played from it): every position along each line is checked.
TRICKY = [
    ("castle through check", "4kr2/8/8/8/8/8/8/R3K2R w KQ - 0 1", []),
    ("castle into check", "4k1r1/8/8/8/8/8/8/R3K2R w KQ - 0 1", []),
    ("castle out of check", "4k3/4r3/8/8/8/8/8/R3K2R w KQ - 0 1", []),
    ("queenside past an attacked b1", "1r2k3/8/8/8/8/8/8/R3K2R w KQ - 0 1", []),
    ("black castles", "r3k2r/pppppppp/8/8/8/8/8/4K3 b kq - 0 1", ["e8g8"]),
    ("rook takes rook", "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", ["a1a8", "e8d7"]),
    ("bishop takes rook", "r3k2r/8/8/8/8/8/1B6/R3K2R w KQkq - 0 1", ["b2h8"]),
    ("king walks", "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", ["e1e2", "e8f8", "e2e1"]),
    ("en passant", "4k3/3p4/8/4P3/8/8/8/4K3 b - - 0 1", ["d7d5", "e5d6"]),
    ("en passant, diagonal pin", "4k2b/3p4/8/4P3/8/8/8/K7 b - - 0 1", ["d7d5"]),
    ("en passant along the pin", "4k3/5p2/7b/4P3/8/8/8/K7 b - - 0 1", ["f7f5"]),
    ("en passant, rank pin", "4k3/3p4/8/K3P2r/8/8/8/8 b - - 0 1", ["d7d5", "a5a4", "h5h6", "a4a5", "h6h5"]),
    ("en passant evades check", "4k3/3p4/8/2P1P3/4K3/8/8/8 b - - 0 1", ["d7d5"]),
    ("en passant ignores check", "2b1k3/3p4/8/2P5/6K1/8/8/8 b - - 0 1", ["d7d5", "g4f4"]),
    ("double push, nobody beside", "4k3/3p4/8/8/8/8/8/4K3 b - - 0 1", ["d7d5"]),
    ("en passant from a FEN", "4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 2", []),
    ("promotions", "r3k3/1P6/8/8/8/8/8/4K3 w q - 0 1", ["b7a8n"]),
    ("black promotes on a rook", "4k3/8/8/8/8/8/1p6/R3K3 b Q - 0 1", ["b2a1r"]),
    ("stalemate", "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", []),
    ("checkmate", "3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1", []),
    ("fool's mate", None, ["f2f3", "e7e5", "g2g4", "d8h4"]),
    ("double check", "4k3/8/8/8/8/8/4r3/R3K2n w Q - 0 1", []),
    ("clock 45", "4k3/8/8/8/8/8/8/R3K3 w Q - 45 60", ["a1a2", "e8d8"]),
    ("clock 99, a quiet move claims", "4k3/8/8/8/8/8/8/R3K3 w Q - 99 60", ["a1a2", "e8d8"]),
    ("clock 99, only zeroing moves", "k7/8/8/8/8/1q6/P7/K7 w - - 99 80", []),
    ("clock 99, every quiet move ends the game", "7k/8/6Q1/6R1/5K2/8/2B5/8 w - - 99 70", []),
    ("clock 99, quiet moves end it, pawn moves not", "k7/2QN4/K7/8/8/8/5P2/8 w - - 99 70", []),
    ("clock 100", "4k3/8/8/8/8/8/8/R3K3 w Q - 100 60", []),
    ("clock 100, checkmated", "3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 100 80", []),
    ("clock 150", "4k3/8/8/8/8/8/8/R3K3 b Q - 150 90", ["e8d8"]),
    ("bare kings", "4k3/8/8/8/8/8/8/4K3 w - - 0 1", []),
    ("knight against king", "4k3/8/8/8/8/8/8/4KN2 w - - 0 1", []),
    ("knight against knight", "4kn2/8/8/8/8/8/8/4KN2 w - - 0 1", []),
    ("two knights", "4k3/8/8/8/8/8/8/3NKN2 w - - 0 1", []),
    ("knight against bishop", "4kb2/8/8/8/8/8/8/4KN2 w - - 0 1", []),
    ("bishops on one colour", "4kb2/8/8/8/8/8/8/2B1K3 w - - 0 1", []),
    ("bishops on both colours", "4k1b1/8/8/8/8/8/8/2B1K3 w - - 0 1", []),
    ("two bishops on one colour", "4k3/8/8/8/8/8/8/3BKB2 w - - 0 1", []),
    ("a pawn left", "4k3/8/8/8/8/8/4P3/4K3 w - - 0 1", []),
    ("a pawn takes and becomes a bishop", "4k3/8/8/8/8/8/5p2/3K2N1 b - - 0 1", ["f2g1b"]),
]


def play_line(name: str, fen: str | None, ucis: list[str]) -> Game:
    board = chess.Board(fen) if fen else chess.Board()
    assert nb.supported(board), name
    rb = nb.from_board(board)
    game = Game(name)
    keys = [nb.repetition_key(rb)]
    for i in range(len(ucis) + 1):
        moves = list(board.legal_moves)
        game.positions.append(_position(board, rb, moves, keys))
        if i == len(ucis):
            return game
        move = chess.Move.from_uci(ucis[i])
        assert move in moves, (name, ucis[i])
        board.push(move)
        game.moves.append(nb.code_of_move(move))
        rb = nb.child(rb, game.moves[-1])
        keys.append(nb.repetition_key(rb))
    raise AssertionError("unreachable")


SHUFFLE_FENS = [
    "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 45 3",
    "4k3/8/8/8/8/8/4n3/R3K3 b Q - 90 70",
]


@pytest.fixture(scope="module")
def random_games() -> list[Game]:
    rng = random.Random(20240607)
    games = []
    for i in range(40):
        style = ("uniform", "captures", "shuffle")[i % 3]
        fen = SHUFFLE_FENS[i // 3 % 2] if style == "shuffle" and i % 4 == 2 else None
        games.append(play(f"{style} {i}", rng, style, fen))
    return games


@pytest.fixture(scope="module")
def tricky_games() -> list[Game]:
    return [play_line(name, fen, ucis) for name, fen, ucis in TRICKY]


@pytest.fixture(scope="module")
def all_games(random_games: list[Game], tricky_games: list[Game]) -> list[Game]:
    return random_games + tricky_games


def test_the_games_cover_the_rules(random_games: list[Game]) -> None:
    """The random games reach what the rules are about: ends, repetitions, long clocks."""
    positions = [p for g in random_games for p in g.positions]
    assert len(positions) > 4000
    terminals = {p.terminal for p in positions}
    assert terminals == {None, 0.0, -1.0}
    repeated = [nb.repetitions(p.path_keys, p.board.halfmove_clock) for p in positions]
    assert max(repeated) >= 4  # fivefold
    assert sum(r >= 2 for r in repeated) > 50
    clocks = {p.board.halfmove_clock for p in positions}
    assert {98, 99, 100, 101} <= clocks
    assert sum(p.board.has_legal_en_passant() for p in positions) >= 3


def test_legal_codes_match_python_chess(all_games: list[Game]) -> None:
    for game in all_games:
        for p in game.positions:
            codes = nb.legal_codes(p.rb).tolist()
            assert len(codes) == len(set(codes)), (game.name, p.board.fen())
            assert sorted(codes) == p.legal, (game.name, p.board.fen())
            # in python-chess's order, so that a search's ties and noise fall as on python-chess boards
            assert codes == [nb.code_of_move(m) for m in p.board.legal_moves], (game.name, p.board.fen())
            assert nb.legal_codes(p.rb).tolist() == codes  # asking again gives them again
            assert nb.turn(p.rb) is p.board.turn


def assert_same_position(rb: rust_chess.Board, board: chess.Board, where: object) -> None:
    """rust_chess's board is python-chess's: pieces, side to move, castling rights, clocks (by
    FEN, whose en passant field rust_chess writes differently), en passant square and key."""
    fen = board.fen()
    mine, theirs = rb.get_fen().split(" "), fen.split(" ")
    assert mine[:3] + mine[4:] == theirs[:3] + theirs[4:], where
    assert nb.halfmove_clock(rb) == board.halfmove_clock, where
    # rust_chess keeps the square after a double push beside an enemy pawn, legal capture or not
    if board.has_legal_en_passant() or rb.en_passant is not None:
        assert rb.en_passant == board.ep_square, where
    assert nb.repetition_key(rb) == nb.repetition_key(rust_chess.Board(fen, mode=nb._NONE_MODE)), where


def test_child_matches_push(all_games: list[Game]) -> None:
    """Every move played, and every legal move of every tricky position and of every tenth
    position of the random games."""
    checked = 0
    for game in all_games:
        tricky = not game.name[-1].isdigit()
        for i, p in enumerate(game.positions):
            codes = p.legal if tricky or i % 10 == 0 else game.moves[i : i + 1]
            for code in codes:
                board = p.board.copy(stack=False)
                board.push(move_of(code))
                assert_same_position(nb.child(p.rb, code), board, (game.name, p.board.fen(), code))
                checked += 1
            if i < len(game.moves):
                assert game.positions[i + 1].rb.zobrist_hash == nb.child(p.rb, game.moves[i]).zobrist_hash
    assert checked > 8000, checked


def test_from_board_matches_the_game(all_games: list[Game]) -> None:
    """A board made from python-chess's position equals the one the moves led to."""
    for game in all_games:
        for p in game.positions:
            room = p.board.halfmove_clock <= 155 and p.board.fullmove_number <= 205
            assert nb.supported(p.board) is room, (game.name, p.board.fen())
            assert_same_position(p.rb, p.board, (game.name, p.board.fen()))


def test_terminal_value_matches(all_games: list[Game]) -> None:
    for game in all_games:
        for p in game.positions:
            reps = nb.repetitions(p.path_keys, nb.halfmove_clock(p.rb))
            where = (game.name, p.board.fen(), reps)
            assert nb.terminal_value(p.rb, reps) == p.terminal, where
            assert nb.terminal_value(p.rb, reps, len(p.legal)) == p.terminal, where


def test_repetition_key_classes_match(all_games: list[Game]) -> None:
    """Equal repetition keys exactly where python-chess's transposition keys are equal."""
    classes: dict[object, set[int]] = {}
    owners: dict[int, set[object]] = {}
    for game in all_games:
        for p in game.positions:
            key = nb.repetition_key(p.rb)
            assert key == p.path_keys[-1]
            classes.setdefault(p.key, set()).add(key)
            owners.setdefault(key, set()).add(p.key)
    assert all(len(keys) == 1 for keys in classes.values())
    assert all(len(keys) == 1 for keys in owners.values())


def _words_from_planes(planes: np.ndarray, white: bool) -> tuple[int, ...]:
    pieces = planes[:12] if white else planes[:12, ::-1, :]  # back to python-chess's squares
    bits = np.packbits(pieces.reshape(12, 64).astype(np.uint8), axis=1, bitorder="little")
    return tuple(int(w) for w in np.ascontiguousarray(bits).view("<u8").reshape(12))


def test_piece_words_and_constant_fields_match_encode_boards(all_games: list[Game]) -> None:
    positions = [p for g in all_games for p in g.positions]
    planes = encode_boards([p.board for p in positions], history=1)
    for p, x in zip(positions, planes, strict=True):
        white, fullmove, ok, oq, tk, tq, clock = nb.constant_fields(p.rb)
        assert nb.piece_words(p.rb) == _words_from_planes(x, white), p.board.fen()
        constants = x[14:, 0, 0]
        expected = [white, fullmove / 100, ok, oq, tk, tq, clock / 100]
        assert constants.tolist() == np.array(expected, dtype=np.float32).tolist(), p.board.fen()
        assert (white, fullmove, clock) == (p.board.turn, p.board.fullmove_number, p.board.halfmove_clock)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("castle through check", {"e1c1"}),
        ("castle into check", {"e1c1"}),
        ("castle out of check", set()),
        ("queenside past an attacked b1", {"e1c1", "e1g1"}),
    ],
)
def test_castling(name: str, expected: set[str], tricky_games: list[Game]) -> None:
    game = next(g for g in tricky_games if g.name == name)
    castles = {nb._UCI_OF_CODE[c] for c in nb.legal_codes(game.positions[0].rb)} & {"e1c1", "e1g1"}
    assert castles == expected


@pytest.mark.parametrize(
    ("name", "ply", "capture", "legal"),
    [
        ("en passant", 1, "e5d6", True),
        ("en passant, diagonal pin", 1, "e5d6", False),
        ("en passant along the pin", 1, "e5f6", True),
        ("en passant, rank pin", 1, "e5d6", False),
        ("en passant evades check", 1, "e5d6", True),
        ("en passant ignores check", 1, "c5d6", False),
        ("en passant from a FEN", 0, "e5d6", True),
    ],
)
def test_en_passant(name: str, ply: int, capture: str, legal: bool, tricky_games: list[Game]) -> None:
    game = next(g for g in tricky_games if g.name == name)
    p = game.positions[ply]
    assert (capture in {nb._UCI_OF_CODE[c] for c in nb.legal_codes(p.rb)}) is legal
    assert p.rb.en_passant is not None  # an enemy pawn beside: rust_chess keeps the square...
    without = chess.Board(p.board.fen().replace(chess.SQUARE_NAMES[p.board.ep_square], "-"))
    # ...but the key has it only when the capture is legal, as python-chess's
    assert (nb.repetition_key(p.rb) == nb.repetition_key(nb.from_board(without))) is not legal


def test_rank_pin_repetition(tricky_games: list[Game]) -> None:
    """After the illegal en passant square is gone, the position repeats by python-chess's key."""
    game = next(g for g in tricky_games if g.name == "en passant, rank pin")
    first, last = game.positions[1], game.positions[-1]
    assert first.key == last.key and first.rb.zobrist_hash != last.rb.zobrist_hash
    assert nb.repetition_key(first.rb) == nb.repetition_key(last.rb)
    assert nb.repetitions(last.path_keys, nb.halfmove_clock(last.rb)) == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("stalemate", 0.0),
        ("checkmate", -1.0),
        ("clock 99, a quiet move claims", 0.0),
        ("clock 99, only zeroing moves", None),
        ("clock 99, every quiet move ends the game", None),
        ("clock 99, quiet moves end it, pawn moves not", None),
        ("clock 100", 0.0),
        ("clock 100, checkmated", -1.0),
        ("bare kings", 0.0),
        ("knight against king", 0.0),
        ("knight against knight", None),
        ("two knights", None),
        ("knight against bishop", None),
        ("bishops on one colour", 0.0),
        ("bishops on both colours", None),
        ("two bishops on one colour", 0.0),  # rust_chess's rule says no
        ("a pawn left", None),
    ],
)
def test_terminal_positions(name: str, value: float | None, tricky_games: list[Game]) -> None:
    p = next(g for g in tricky_games if g.name == name).positions[0]
    assert p.terminal == value  # the reference says so...
    assert nb.terminal_value(p.rb, 0) == value  # ...and so do we


def test_history_keys_follow_the_game(random_games: list[Game]) -> None:
    """``history_keys`` of a python-chess game: the keys since its last capture or pawn move."""
    for game in random_games[:9]:
        board = chess.Board(game.positions[0].board.fen())
        for i, code in enumerate(game.moves):
            board.push(move_of(code))
            if i % 5 == 0:
                p = game.positions[i + 1]
                keys = nb.history_keys(board)
                assert len(keys) == min(board.halfmove_clock, len(board.move_stack)) + 1
                assert keys == p.path_keys[len(p.path_keys) - len(keys) :]
                reps = nb.repetitions(keys, board.halfmove_clock)
                assert reps == nb.repetitions(p.path_keys, board.halfmove_clock)
                assert nb.terminal_value(nb.from_board(board), reps) == reference_terminal_value(board)


def test_supported() -> None:
    assert nb.supported(chess.Board())
    assert not nb.supported(chess.Board(chess960=True))
    assert not nb.supported(chess.variant.AtomicBoard())
    assert not nb.supported(chess.Board("4k3/8/8/8/8/8/8/8 w - - 0 1"))  # no white king
    assert not nb.supported(chess.Board("4k3/8/8/8/8/8/8/3KK3 w - - 0 1"))  # two
    assert not nb.supported(chess.Board("4k3/4R3/8/8/8/8/8/4K3 w - - 0 1"))  # black is in check
    assert not nb.supported(chess.Board("4k3/8/8/8/8/8/8/4K3 w - - 156 1"))  # the clock, 100 plies on
    assert nb.supported(chess.Board("4k3/8/8/8/8/8/8/4K3 w - - 155 205"))
    assert not nb.supported(chess.Board("4k3/8/8/8/8/8/8/4K3 w - - 0 206"))


def test_the_move_generator_is_reset() -> None:
    """rust_chess's generator resumes where it stopped; legal_codes resets it first."""
    rb = nb.from_board(chess.Board())
    assert len(list(rb.generate_legal_moves())) == 20
    assert list(rb.generate_legal_moves()) == []  # the trap
    assert len(nb.legal_codes(rb)) == 20 and len(nb.legal_codes(rb)) == 20
    assert nb.terminal_value(rb, 0) is None  # counts after a reset too


def test_eight_bit_counters() -> None:
    """rust_chess's clocks are 8-bit: why supported() leaves room for MAX_PLIES."""
    rb = nb.from_board(chess.Board("4k3/8/8/8/8/8/8/R3K3 w Q - 255 60"))
    assert nb.halfmove_clock(nb.child(rb, nb.code_of_move(chess.Move.from_uci("a1a2")))) == 0
    with pytest.raises(ValueError):
        nb.from_board(chess.Board("4k3/8/8/8/8/8/8/R3K3 w Q - 256 60"))


def test_rust_insufficient_material_differs() -> None:
    """Why terminal_value has its own rule: rust_chess plays on with two same-coloured bishops."""
    rb = nb.from_board(chess.Board("4k3/8/8/8/8/8/8/3BKB2 w - - 0 1"))
    assert not rb.is_insufficient_material() and nb.terminal_value(rb, 0) == 0.0


def test_rust_fen_writes_the_pawns_square() -> None:
    """rust_chess's FEN names the double-pushed pawn's square; its en_passant property is right."""
    game = play_line("e", "4k3/3p4/8/4P3/8/8/8/4K3 b - - 0 1", ["d7d5"])
    rb = game.positions[1].rb
    assert rb.get_fen().split(" ")[3] == "d5" and rb.en_passant == chess.D6


_NEVER_ABORTS = """
import chess
from chessrl.search import native_board as nb
for fen in ["4k3/8/8/8/8/8/8/R3K3 w Q - 8 60", "4k3/8/8/8/8/8/8/R3K3 w Q - 45 60",
            "4k3/8/8/8/8/8/8/R3K3 w Q - 99 60", "4k3/8/8/8/8/8/8/R3K3 w Q - 150 60",
            "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 120 3"]:
    board = chess.Board(fen)
    rb = nb.from_board(board)
    keys = [nb.repetition_key(rb)]
    for ply in range(40):   # shuffle: a fivefold repetition and more
        codes = nb.legal_codes(rb)
        nb.terminal_value(rb, nb.repetitions(keys, nb.halfmove_clock(rb)), len(codes))
        nb.piece_words(rb), nb.constant_fields(rb)
        move = board.move_stack[-2] if ply >= 2 else next(m for m in board.legal_moves if not board.is_zeroing(m))
        move = chess.Move(move.to_square, move.from_square) if ply >= 2 else move
        board.push(move)
        rb = nb.child(rb, nb.code_of_move(move))
        keys.append(nb.repetition_key(rb))
    assert nb.repetitions(keys, nb.halfmove_clock(rb)) >= 4, fen
print("ok")
"""

_FULL_MODE_ABORTS = """
import rust_chess
rb = rust_chess.Board("4k3/8/8/8/8/8/8/R3K3 w Q - 45 60", mode=rust_chess.RepetitionDetectionMode.FULL)
rb.make_move_new(rust_chess.Move("a1a2"))
print("survived")
"""


def test_high_clocks_and_repetitions_never_abort() -> None:
    result = subprocess.run([sys.executable, "-c", _NEVER_ABORTS], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


def test_full_repetition_mode_would_abort() -> None:
    """The trap the NONE mode avoids: rust_chess 0.4.3 panics (SIGABRT) in FULL mode."""
    result = subprocess.run(
        [sys.executable, "-c", _FULL_MODE_ABORTS], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "survived" not in result.stdout
    assert "panicked" in result.stderr


def test_docstring_examples() -> None:
    result = doctest.testmod(nb, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 5 and result.failed == 0
