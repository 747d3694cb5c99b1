"""compiled_board against python-chess, the reference: legal moves in order, children, end-of-game
values and repetition keys agree on every position of seeded random games (uniform,
capture-hungry, and shuffling ones that repeat and run past the fifty-move rule) and on the tricky
lines native_board is held to (castling, en passant with pins and checks, promotions, mates,
clocks, material)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import chess
import numpy as np
import pytest
from test_native_board import SHUFFLE_FENS, TRICKY

from chessrl.search import compiled_board as cb
from chessrl.search.native_board import code_of_move, repetitions
from chessrl.search.search_board import terminal_value as reference_terminal_value


@dataclass
class Position:
    board: chess.Board  # a copy without the move stack
    words: np.ndarray
    meta: np.ndarray
    legal: list[int]  # python-chess's legal moves as codes, in its order
    key: object  # python-chess's _transposition_key
    terminal: float | None  # search_board.terminal_value on the board with its history
    path_keys: list[int]  # the compiled key of every position of the game so far, this one last


@dataclass
class Game:
    name: str
    positions: list[Position] = field(default_factory=list)
    moves: list[int] = field(default_factory=list)


def _record(
    game: Game, board: chess.Board, words: np.ndarray, meta: np.ndarray, keys: list[int]
) -> list[chess.Move]:
    moves = list(board.legal_moves)
    game.positions.append(
        Position(
            board.copy(stack=False),
            words,
            meta,
            [code_of_move(m) for m in moves],
            board._transposition_key(),
            reference_terminal_value(board),
            list(keys),
        )
    )
    return moves


def _push(
    game: Game, board: chess.Board, move: chess.Move, words: np.ndarray, meta: np.ndarray, keys: list[int]
):
    board.push(move)
    code = code_of_move(move)
    game.moves.append(code)
    w2, m2 = np.empty_like(words), np.empty_like(meta)
    cb.make_move(words, meta, code, w2, m2)
    keys.append(int(w2[cb.KEY]))
    return w2, m2


def play(name: str, rng: random.Random, style: str, fen: str | None = None, plies: int = 200) -> Game:
    """A game of ``style`` (uniform, captures, shuffle) to its end or ``plies`` plies, draws by
    rule ignored, the compiled position made by ``make_move`` beside python-chess's."""
    board = chess.Board(fen) if fen else chess.Board()
    words, meta = cb.from_board(board)
    game, keys = Game(name), [int(words[cb.KEY])]
    while True:
        moves = _record(game, board, words, meta, keys)
        if not moves or len(game.moves) >= plies:
            return game
        move = None
        if style == "captures":
            captures = [m for m in moves if board.is_capture(m)]
            if captures and rng.random() < 0.7:
                move = rng.choice(captures)
        elif style == "shuffle":
            quiet = [m for m in moves if not board.is_zeroing(m)]
            if len(board.move_stack) >= 2 and rng.random() < 0.6:
                last = board.move_stack[-2]
                back = chess.Move(last.to_square, last.from_square)
                move = back if board.is_legal(back) and not board.is_zeroing(back) else None
            if move is None and quiet and rng.random() < 0.95:
                move = rng.choice(quiet)
        words, meta = _push(game, board, move or rng.choice(moves), words, meta, keys)


def play_line(name: str, fen: str | None, ucis: list[str]) -> Game:
    board = chess.Board(fen) if fen else chess.Board()
    words, meta = cb.from_board(board)
    game, keys = Game(name), [int(words[cb.KEY])]
    for uci in ucis:
        _record(game, board, words, meta, keys)
        words, meta = _push(game, board, chess.Move.from_uci(uci), words, meta, keys)
    _record(game, board, words, meta, keys)
    return game


@pytest.fixture(scope="module")
def all_games() -> list[Game]:
    rng = random.Random(20261128)
    games = []
    for i in range(30):
        style = ("uniform", "captures", "shuffle")[i % 3]
        fen = SHUFFLE_FENS[i // 3 % 2] if style == "shuffle" and i % 4 == 2 else None
        games.append(play(f"{style} {i}", rng, style, fen))
    return games + [play_line(name, fen, ucis) for name, fen, ucis in TRICKY]


def test_the_games_cover_the_rules(all_games: list[Game]) -> None:
    positions = [p for g in all_games for p in g.positions]
    assert len(positions) > 3000
    assert {p.terminal for p in positions} == {None, 0.0, -1.0}
    assert sum(repetitions(p.path_keys, p.board.halfmove_clock) >= 2 for p in positions) > 30
    assert {98, 99, 100, 101} <= {p.board.halfmove_clock for p in positions}
    assert sum(p.board.has_legal_en_passant() for p in positions) >= 3
    assert sum(p.board.is_castling(m) for p in positions for m in p.board.legal_moves) > 20


def test_legal_codes_match_python_chess_in_order(all_games: list[Game]) -> None:
    out = np.empty(cb.MAX_MOVES, dtype=np.int64)
    for game in all_games:
        for p in game.positions:
            n = cb.legal_codes(p.words, p.meta, out)
            assert out[:n].tolist() == p.legal, (game.name, p.board.fen())
            assert cb.legal_count(p.words, p.meta) == n
            assert cb.has_legal_move(p.words, p.meta) is (n > 0)
            assert cb.in_check(p.words, p.meta) is p.board.is_check()


def test_make_move_matches_push(all_games: list[Game]) -> None:
    """Every legal move of every tricky position and of every fifth random one: the position
    after it is python-chess's (by FEN, and the same en passant square python-chess keeps)."""
    w2 = np.empty(cb.WORDS, dtype=np.uint64)
    m2 = np.empty(cb.META, dtype=np.int64)
    checked = 0
    for game in all_games:
        tricky = not game.name[-1].isdigit()
        for i, p in enumerate(game.positions):
            if not (tricky or i % 5 == 0):
                continue
            for code in p.legal:
                board = p.board.copy(stack=False)
                board.push(chess.Move(code % 4096 // 64, code % 64, (None, 5, 4, 3, 2)[code // 4096]))
                cb.make_move(p.words, p.meta, code, w2, m2)
                made = cb.to_board(w2, m2)
                assert made.fen(en_passant="fen") == board.fen(en_passant="fen"), (
                    game.name,
                    p.board.fen(),
                    code,
                )
                assert made.ep_square == board.ep_square
                assert made.clean_castling_rights() == board.clean_castling_rights()
                checked += 1
    assert checked > 5000, checked


def test_from_board_round_trips(all_games: list[Game]) -> None:
    for game in all_games:
        for p in game.positions:
            words, meta = cb.from_board(p.board)
            assert words.tolist() == p.words.tolist() and meta.tolist() == p.meta.tolist(), (
                game.name,
                p.board.fen(),
            )
            assert cb.to_board(words, meta).fen() == p.board.fen()


def test_terminal_value_matches(all_games: list[Game]) -> None:
    for game in all_games:
        for p in game.positions:
            reps = repetitions(p.path_keys, p.board.halfmove_clock)
            value = cb.terminal_value(p.words, p.meta, len(p.legal), reps)
            got = None if math.isnan(value) else value
            assert got == p.terminal, (game.name, p.board.fen(), reps)


def test_repetition_key_classes_match(all_games: list[Game]) -> None:
    """Equal keys exactly where python-chess's transposition keys are equal; a key made from the
    python-chess board equals the one the moves led to."""
    classes: dict[object, set[int]] = {}
    owners: dict[int, set[object]] = {}
    for game in all_games:
        for p in game.positions:
            key = int(p.words[cb.KEY])
            assert key == p.path_keys[-1] == int(cb.repetition_key(p.words, p.meta))
            classes.setdefault(p.key, set()).add(key)
            owners.setdefault(key, set()).add(p.key)
    assert all(len(keys) == 1 for keys in classes.values())
    assert all(len(keys) == 1 for keys in owners.values())


def test_clocks_past_eight_bits() -> None:
    """No 8-bit counters (rust_chess's limit): a clock of 300 counts on."""
    words, meta = cb.from_board(chess.Board("4k3/8/8/8/8/8/8/R3K3 w Q - 300 400"))
    w2, m2 = np.empty_like(words), np.empty_like(meta)
    cb.make_move(words, meta, cb.code_of_uci("a1a2"), w2, m2)
    assert (m2[cb.CLOCK], m2[cb.FULLMOVE]) == (301, 400)
    assert cb.terminal_value(w2, m2, cb.legal_count(w2, m2), 0) == 0.0
