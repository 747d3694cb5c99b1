"""One game between two players: results checked against python-chess, openings, forfeits,
engine-verified resignation, per-side counts, PGN out, and opening books."""

from __future__ import annotations

import io
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import chess
import chess.pgn
import pytest

from chessrl.arena.game import (
    ArenaGame,
    Opening,
    book_openings,
    game_pgn,
    heldout_openings,
    play_game,
    random_openings,
)
from chessrl.arena.players import MoveChoice, RandomPlayer
from cluster.errors import InputDataError

BRATKO_KOPEC = Path(__file__).resolve().parents[1] / "data" / "epd" / "bratko-kopec.epd"
SCHOLARS_MATE = ["e2e4", "e7e5", "f1c4", "b8c6", "d1h5", "g8f6", "h5f7"]


class ScriptedPlayer:
    """Plays the given choices in order and records every board it was shown."""

    def __init__(self, name: str, choices: list[MoveChoice | str]) -> None:
        self.name = name
        self.choices = [MoveChoice(c) if isinstance(c, str) else c for c in choices]
        self.seen: list[chess.Board] = []
        self.seeds: list[int] = []

    def new_game(self, seed: int) -> None:
        self.seeds.append(seed)

    def move(self, board: chess.Board) -> MoveChoice:
        self.seen.append(board.copy())
        return self.choices[len(self.seen) - 1]

    def close(self) -> None:
        pass


class RecordingRandom(RandomPlayer):
    """A random player that records every board it was shown."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: list[chess.Board] = []

    def move(self, board: chess.Board) -> MoveChoice:
        self.seen.append(board.copy())
        return super().move(board)


def start_board(opening: Opening) -> chess.Board:
    board = chess.Board(opening.fen) if opening.fen else chess.Board()
    for uci in opening.moves:
        board.push_uci(uci)
    return board


def replay(game: ArenaGame) -> chess.Board:
    """The game's final board; checks that no earlier position had already ended it."""
    board = start_board(game.opening)
    for uci in game.moves:
        assert board.outcome(claim_draw=True) is None
        move = chess.Move.from_uci(uci)
        assert move in board.legal_moves
        board.push(move)
    return board


def scripted_game(white_moves: list[str], black_moves: list[str]) -> tuple[ScriptedPlayer, ScriptedPlayer]:
    return ScriptedPlayer("w", list(white_moves)), ScriptedPlayer("b", list(black_moves))


# ---------------------------------------------------------------------------------------------
# results


def test_random_games_end_as_python_chess_says() -> None:
    terminations = set()
    for seed in range(6):
        max_plies = 400
        game = play_game(RandomPlayer("a"), RandomPlayer("b"), max_plies=max_plies, seed=seed)
        board = replay(game)
        outcome = board.outcome(claim_draw=True)
        if outcome is None:
            assert len(game.moves) == max_plies
            assert (game.result, game.termination) == ("1/2-1/2", "max_plies")
        else:
            assert game.result == outcome.result()
            assert game.termination == outcome.termination.name.lower()
        assert (game.white, game.black) == ("a", "b")
        assert game.player_moves == {"white": (len(game.moves) + 1) // 2, "black": len(game.moves) // 2}
        terminations.add(game.termination)
        # the same seed plays the same game
        again = play_game(RandomPlayer("a"), RandomPlayer("b"), max_plies=max_plies, seed=seed)
        assert again.moves == game.moves
    assert terminations - {"max_plies"}, "some random game should end over the board"


def test_a_short_max_plies_is_a_draw_and_checkmate_wins() -> None:
    game = play_game(RandomPlayer("a"), RandomPlayer("b"), max_plies=7, seed=2)
    assert (len(game.moves), game.result, game.termination) == (7, "1/2-1/2", "max_plies")

    white, black = scripted_game(SCHOLARS_MATE[0::2], SCHOLARS_MATE[1::2])
    game = play_game(white, black, max_plies=100)
    assert game.moves == SCHOLARS_MATE
    assert (game.result, game.termination) == ("1-0", "checkmate")
    assert game.score_for("w") == 1.0 and game.score_for("b") == 0.0


def test_players_get_distinct_seeds() -> None:
    white, black = scripted_game(["e2e4"], ["e7e5"])
    play_game(white, black, max_plies=2, seed=10)
    assert white.seeds != black.seeds


# ---------------------------------------------------------------------------------------------
# openings applied first


def test_opening_moves_are_played_before_the_players_move() -> None:
    white, black = RecordingRandom("w"), RecordingRandom("b")
    opening = ("e2e4", "e7e5", "g1f3")
    game = play_game(white, black, opening=opening, max_plies=4, seed=1)
    # three book plies: black moves first, from the position after them
    assert [m.uci() for m in black.seen[0].move_stack] == list(opening)
    assert [m.uci() for m in white.seen[0].move_stack] == [*opening, game.moves[0]]
    assert game.opening == Opening(moves=opening)
    assert len(game.moves) == 4
    assert game.player_moves == {"white": 2, "black": 2}
    replay(game)


def test_a_fen_opening_starts_from_that_position() -> None:
    fen = "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3"
    opening = Opening(fen=fen, moves=("f1b5", "a7a6"), name="ruy")
    white, black = RecordingRandom("w"), RecordingRandom("b")
    game = play_game(white, black, opening=opening, max_plies=3, seed=4)
    first = white.seen[0]
    assert first.root().fen() == fen
    assert [m.uci() for m in first.move_stack] == ["f1b5", "a7a6"]
    final = replay(game)
    assert final.root().fen() == fen
    assert len(game.moves) == 3


# ---------------------------------------------------------------------------------------------
# forfeits


def test_a_player_with_no_move_forfeits() -> None:
    white = ScriptedPlayer("w", [MoveChoice(None, 4, False, comment="4 illegal attempts: forfeit")])
    black = ScriptedPlayer("b", ["e7e5"])
    game = play_game(white, black)
    assert (game.result, game.termination, game.moves) == ("0-1", "forfeit", [])
    assert game.comments == ["4 illegal attempts: forfeit"]
    assert game.illegal_attempts == {"white": 4, "black": 0}
    assert game.score_for("b") == 1.0


def test_black_forfeit_after_moves_and_the_default_comment() -> None:
    white, black = scripted_game(["e2e4", "g1f3"], ["e7e5", MoveChoice(None)])  # type: ignore[list-item]
    game = play_game(white, black)
    assert (game.result, game.termination) == ("1-0", "forfeit")
    assert game.moves == ["e2e4", "e7e5", "g1f3"]
    assert game.comments[-1] == "b made no legal move"


@pytest.mark.parametrize("bad", ["e2e5", "e7e5", "a1a1", "zz", "0000", ""])
def test_an_illegal_or_unreadable_move_forfeits(bad: str) -> None:
    white, black = scripted_game([bad], ["e7e5"])
    game = play_game(white, black)
    assert (game.result, game.termination, game.moves) == ("0-1", "forfeit", [])


# ---------------------------------------------------------------------------------------------
# engine-verified resignation


def losing_side_evaluator(loser: str, seen: list[str]) -> Callable[[str], int]:
    """-1000 (from the side to move) whenever ``loser`` ('w' or 'b') is to move, else +1000."""

    def evaluate(fen: str) -> int:
        seen.append(fen)
        return -1000 if fen.split()[1] == loser else 1000

    return evaluate


@pytest.mark.parametrize("resign_plies", [1, 3])
def test_white_resigns_after_resign_plies_of_its_own_lost_positions(resign_plies: int) -> None:
    seen: list[str] = []
    game = play_game(
        RandomPlayer("a"),
        RandomPlayer("b"),
        max_plies=100,
        seed=3,
        evaluator=losing_side_evaluator("w", seen),
        resign_cp=500,
        resign_plies=resign_plies,
    )
    # white is to move after every black move: its streak reaches resign_plies at ply 2*resign_plies
    assert (game.result, game.termination) == ("0-1", "resign_adjudicated")
    assert len(game.moves) == 2 * resign_plies
    # the evaluator saw each position after a move
    board = chess.Board()
    expected = []
    for uci in game.moves:
        board.push_uci(uci)
        expected.append(board.fen())
    assert seen == expected


def test_black_resigns_too() -> None:
    seen: list[str] = []
    game = play_game(
        RandomPlayer("a"),
        RandomPlayer("b"),
        max_plies=100,
        seed=5,
        evaluator=losing_side_evaluator("b", seen),
        resign_cp=300,
        resign_plies=2,
    )
    assert (game.result, game.termination, len(game.moves)) == ("1-0", "resign_adjudicated", 3)


def test_a_streak_is_broken_by_a_better_or_unknown_score() -> None:
    calls: list[str] = []

    def evaluate(fen: str) -> int | None:
        calls.append(fen)
        ply = len(calls)
        if fen.split()[1] == "b":
            return 0
        # white to move at plies 2, 4, 6, ...: lost, except at ply 4 (better) and ply 8 (unknown)
        return {4: 0, 8: None}.get(ply, -600)

    game = play_game(
        RandomPlayer("a"),
        RandomPlayer("b"),
        max_plies=100,
        seed=7,
        evaluator=evaluate,
        resign_cp=600,  # exactly -resign_cp counts as lost
        resign_plies=2,
    )
    # streak: ply 2 -> 1, ply 4 -> 0, ply 6 -> 1, ply 8 -> 0, ply 10 -> 1, ply 12 -> 2: resign
    assert (game.result, game.termination, len(game.moves)) == ("0-1", "resign_adjudicated", 12)


def test_no_resignation_without_resign_cp() -> None:
    seen: list[str] = []
    game = play_game(
        RandomPlayer("a"), RandomPlayer("b"), max_plies=10, seed=3, evaluator=losing_side_evaluator("w", seen)
    )
    assert game.termination != "resign_adjudicated"


# ---------------------------------------------------------------------------------------------
# counts, serialisation, PGN


def counted_game() -> ArenaGame:
    white = ScriptedPlayer(
        "lm",
        [
            MoveChoice(
                "e2e4", illegal_attempts=2, first_attempt_legal=False, fallback=True, comment="2 illegal"
            ),
            MoveChoice("g1f3"),
            MoveChoice("f1c4", illegal_attempts=1, first_attempt_legal=False),
        ],
    )
    black = ScriptedPlayer(
        "rnd",
        [
            MoveChoice("e7e5", illegal_attempts=1, first_attempt_legal=False),
            MoveChoice(
                "b8c6", illegal_attempts=3, first_attempt_legal=False, fallback=True, comment="fell back"
            ),
            MoveChoice(
                None, illegal_attempts=4, first_attempt_legal=False, comment="4 illegal attempts: forfeit"
            ),
        ],
    )
    return play_game(white, black, max_plies=50)


def test_illegal_attempts_first_attempt_legal_and_fallbacks_are_summed_per_side() -> None:
    game = counted_game()
    assert game.moves == ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4"]
    assert (game.result, game.termination) == ("1-0", "forfeit")
    assert game.illegal_attempts == {"white": 2 + 0 + 1, "black": 1 + 3 + 4}
    assert game.first_attempt_legal == {"white": 1, "black": 0}
    assert game.fallbacks == {"white": 1, "black": 1}
    assert game.player_moves == {"white": 3, "black": 3}
    assert game.comments == ["2 illegal", "", "", "fell back", "", "4 illegal attempts: forfeit"]


def test_arena_game_round_trips_through_a_dict_and_json() -> None:
    games = [
        counted_game(),
        play_game(
            RandomPlayer("a"),
            RandomPlayer("b"),
            opening=Opening(fen="8/8/8/4k3/8/8/4P3/4K3 w - - 0 1", moves=("e2e4",), name="pawn"),
            max_plies=9,
            seed=1,
        ),
    ]
    for game in games:
        data = game.to_dict()
        assert ArenaGame.from_dict(data) == game
        assert ArenaGame.from_dict(json.loads(json.dumps(data))) == game


def read_pgn(text: str) -> chess.pgn.Game:
    game = chess.pgn.read_game(io.StringIO(text))
    assert game is not None and not game.errors, game.errors if game else None
    return game


def test_game_pgn_reads_back_with_the_same_moves_headers_and_comments() -> None:
    game = counted_game()
    parsed = read_pgn(game_pgn(game, event="test event", round_="7", extra={"Site": "here"}))
    headers = parsed.headers
    assert (headers["White"], headers["Black"], headers["Result"]) == ("lm", "rnd", "1-0")
    assert (headers["Termination"], headers["Event"], headers["Round"], headers["Site"]) == (
        "forfeit",
        "test event",
        "7",
        "here",
    )
    assert "FEN" not in headers
    nodes = list(parsed.mainline())
    assert [n.move.uci() for n in nodes] == game.moves
    assert nodes[0].comment == "2 illegal"
    assert nodes[3].comment == "fell back"
    assert "4 illegal attempts: forfeit" in nodes[-1].comment  # the forfeit is noted on the last move


def test_game_pgn_from_a_fen_opening_sets_up_the_position() -> None:
    fen = "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3"
    opening = Opening(fen=fen, moves=("f1b5", "a7a6"), name="Ruy Lopez")
    game = play_game(RandomPlayer("x"), RandomPlayer("y"), opening=opening, max_plies=6, seed=2)
    parsed = read_pgn(game_pgn(game))
    assert parsed.headers["SetUp"] == "1" and parsed.headers["FEN"] == fen
    assert parsed.headers["Opening"] == "Ruy Lopez"
    assert parsed.headers["Result"] == game.result == "1/2-1/2"
    assert parsed.headers["Termination"] == "max_plies"
    nodes = list(parsed.mainline())
    assert [n.move.uci() for n in nodes] == ["f1b5", "a7a6", *game.moves]
    assert nodes[1].comment == "book"  # the last book move
    assert parsed.end().board().fen() == replay(game).fen()


# ---------------------------------------------------------------------------------------------
# opening sets


def test_random_openings_are_deterministic_legal_and_unfinished() -> None:
    openings = random_openings(20, 8, seed=11)
    assert openings == random_openings(20, 8, seed=11)
    assert openings != random_openings(20, 8, seed=12)
    assert len(openings) == 20
    assert len({o.name for o in openings}) == 20
    for opening in openings:
        assert opening.fen is None and len(opening.moves) == 8
        board = chess.Board()
        for uci in opening.moves:
            assert chess.Move.from_uci(uci) in board.legal_moves
            board.push_uci(uci)
        assert not board.is_game_over()
    assert len({o.moves for o in openings}) > 1


def test_heldout_openings_are_seeded_prefixes_of_the_games_never_one_twice() -> None:
    rng = random.Random(0)
    games = []
    for length in (40, 40, 40, 7, 3):  # the last two too short for most plies or every ply
        board = chess.Board()
        while board.ply() < length and not board.is_game_over():
            board.push(rng.choice(sorted(board.legal_moves, key=lambda m: m.uci())))
        games.append({"game_id": str(length), "moves": " ".join(m.uci() for m in board.move_stack)})
    games.append({"game_id": "corrupt", "moves": "e2e4 e7e5 e1e8 g8f6 f1c4 b8c6 d2d3 d7d6"})
    games.append({"game_id": "mate", "moves": "f2f3 e7e5 g2g4 d8h4"})  # over at ply 4
    openings = heldout_openings(games, 4, seed=3, plies=(6, 12))
    assert openings == heldout_openings(games, 4, seed=3, plies=(6, 12))
    assert openings != heldout_openings(games, 4, seed=4, plies=(6, 12))
    assert [o.name for o in openings] == ["heldout-0", "heldout-1", "heldout-2", "heldout-3"]
    prefixes = {g["moves"]: g for g in games}
    for o in openings:
        assert o.fen is None and 6 <= len(o.moves) <= 12
        assert any(moves.startswith(" ".join(o.moves)) for moves in prefixes)
        replay(play_game(RandomPlayer("a"), RandomPlayer("b"), opening=o, max_plies=2, seed=0))
    # fewer games than asked: every (game, ply) pair at most once, then it stops
    everything = heldout_openings(games, 1000, seed=3, plies=(6, 12))
    assert len(everything) == 3 * 7 + 2 and len({o.moves for o in everything}) == len(everything)
    assert heldout_openings(games[-2:], 5, seed=3) == [] and heldout_openings([], 5, seed=3) == []
    assert [o.moves for o in heldout_openings(games[:1], 1, seed=0, plies=(0, 0))] == [()]


def test_book_openings_from_bratko_kopec_epd() -> None:
    lines = [line for line in BRATKO_KOPEC.read_text().splitlines() if line.strip()]
    openings = book_openings(BRATKO_KOPEC)
    assert len(openings) == len(lines)
    for line, opening in zip(lines, openings, strict=True):
        fields = line.split()
        expected = chess.Board(" ".join(fields[:4]))
        assert opening.fen == expected.fen() and opening.moves == ()
        assert opening.name == re.search(r"\bid\s+\"?([\w.]+)", line).group(1)
    assert openings[0].name == "BK.01"
    game = play_game(RandomPlayer("a"), RandomPlayer("b"), opening=openings[0], max_plies=4, seed=0)
    replay(game)


def test_book_openings_from_pgn(tmp_path) -> None:
    long_game = "1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7 6. Re1 b5 7. Bb3 d6 8. c3 O-O"
    fen = "4k3/8/8/8/8/8/4P3/4K3 w - - 0 1"
    pgn = (
        f'[Event "a"]\n[Opening "Ruy Lopez"]\n\n{long_game} *\n\n'
        f'[Event "b"]\n\n1. d4 d5 2. c4 *\n\n'
        f'[Event "empty"]\n\n*\n\n'
        f'[Event "c"]\n[SetUp "1"]\n[FEN "{fen}"]\n\n1. e4 Kd7 *\n\n'
    )
    path = tmp_path / "book.pgn"
    path.write_text(pgn)
    openings = book_openings(path, max_plies=12)
    expected_long = []
    board = chess.Board()
    for san in re.sub(r"\d+\.", " ", long_game).split()[:12]:
        expected_long.append(board.push_san(san).uci())
    assert openings[0] == Opening(moves=tuple(expected_long), name="Ruy Lopez")
    assert openings[1] == Opening(moves=("d2d4", "d7d5", "c2c4"), name="book-1")
    assert openings[2] == Opening(fen=fen, moves=("e2e4", "e8d7"), name="book-2")
    assert len(openings) == 3  # the game without moves gives none
    for opening in openings:
        replay(play_game(RandomPlayer("a"), RandomPlayer("b"), opening=opening, max_plies=2, seed=0))


def test_book_openings_bad_input_names_the_file(tmp_path) -> None:
    missing = tmp_path / "missing.epd"
    with pytest.raises(InputDataError, match=re.escape(str(missing))):
        book_openings(missing)

    garbage = tmp_path / "garbage.epd"
    first = BRATKO_KOPEC.read_text().splitlines()[0]
    garbage.write_text(f"{first}\n\nthis is not a position at all\n")
    with pytest.raises(InputDataError, match=re.escape(f"{garbage}:3")):
        book_openings(garbage)

    for name in ("empty.epd", "empty.pgn"):
        empty = tmp_path / name
        empty.write_text("")
        with pytest.raises(InputDataError, match=re.escape(str(empty)) + ".*no usable opening"):
            book_openings(empty)

    not_pgn = tmp_path / "notes.pgn"
    not_pgn.write_text("just some notes, no games here\n")
    with pytest.raises(InputDataError, match=re.escape(str(not_pgn))):
        book_openings(not_pgn)


class _ScriptedArena:
    """Stands in for pipelines.evaluate_matches.Arena (which plays on Ray): each task's game is written to
    ``folder`` as the real one writes it, and the stronger rung (later in the ladder) wins."""

    def __init__(self, rungs: list[str]) -> None:
        self.order, self.lines, self.tasks = rungs, [], 0

    def log(self, line: str) -> None:
        self.lines.append(line)

    def play(self, tasks, folder, what: str) -> dict[str, ArenaGame]:
        games = {}
        for task in tasks:
            white, black = task.white.label, task.black.label
            result = "1-0" if self.order.index(white) > self.order.index(black) else "0-1"
            games[task.key] = ArenaGame(white, black, result, "checkmate", [])
            folder.write_text(f"{task.key}.json", json.dumps(games[task.key].to_dict()))
        self.tasks += len(tasks)
        return games


def test_a_ladder_is_reused_with_the_same_stockfish_and_rated_again_with_another(tmp_path: Path) -> None:
    """``ensure_ladder``: rated once, reused by the next evaluation (no game), rated again (and
    said why) when ladder.json names another Stockfish build."""
    from chessrl.arena.ladder import LadderSettings
    from cluster.storage import Storage
    from pipelines.evaluate_matches import ensure_ladder

    rungs = ("random", "stockfish:elo=1350,nodes=50,random=50", "stockfish:elo=1350,nodes=50")
    settings, root = LadderSettings(rungs=rungs, games=4), Storage.from_uri(str(tmp_path))
    arena = _ScriptedArena(list(settings.labels))
    ladder, played = ensure_ladder(arena, settings, root, "Stockfish 17 (sha256 aaaa)")
    assert played == arena.tasks == 8 and ladder.stockfish == "Stockfish 17 (sha256 aaaa)"
    [saved] = (tmp_path / "ladder").iterdir()
    assert json.loads((saved / "ladder.json").read_text())["stockfish"] == ladder.stockfish

    again, played = ensure_ladder(arena, settings, root, "Stockfish 17 (sha256 aaaa)")
    assert played == 0 and arena.tasks == 8 and again.ratings == ladder.ratings
    assert "no ladder games to play" in arena.lines[-1]

    other, played = ensure_ladder(arena, settings, root, "Stockfish 18 (sha256 bbbb)")
    assert played == 8 and other.stockfish == "Stockfish 18 (sha256 bbbb)"
    assert any(
        "was rated with Stockfish 17 (sha256 aaaa), this is Stockfish 18" in line for line in arena.lines
    )
    assert json.loads((saved / "ladder.json").read_text())["stockfish"] == "Stockfish 18 (sha256 bbbb)"


def test_a_saved_game_of_a_model_trained_again_into_its_folder_is_not_resumed(tmp_path: Path) -> None:
    import os

    from chessrl.arena.game import ArenaGame, Opening
    from chessrl.arena.players import model_fingerprint, parse_player_spec
    from cluster.errors import UserError
    from pipelines.evaluate_matches import GameTask, check_players

    model = tmp_path / "ppo" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"first")
    spec = parse_player_spec(f"lm:{model},masked")
    task = GameTask("pair-00-a-0000", spec, parse_player_spec("random"), Opening(moves=()), 1)
    game = ArenaGame(spec.label, "random", "1-0", "checkmate", [])
    played_with = {"white": model_fingerprint(spec), "black": None}
    check_players(game, task, "g.json", played_with)  # the same files: resumed
    check_players(game, task, "g.json", None)  # a game saved before fingerprints: resumed as before
    (model / "model.safetensors").write_bytes(b"second")  # ppo run again into the same folder
    os.utime(model / "model.safetensors", ns=(1, 1))
    with pytest.raises(
        UserError, match=r"g\.json was played by lm:.*ppo/model,masked \(white\).*changed since"
    ):
        check_players(game, task, "g.json", played_with)


def test_game_tasks_are_sized_so_the_limit_fits_beside_the_engine_pool() -> None:
    """A whole CPU a game ran one game at a time beside the pool on 2 CPUs, each in a new worker
    process (bench/arena_parallel.py): ``limit`` games and the pool fit the CPUs, one CPU at most."""
    from pipelines.evaluate_matches import game_cpus

    for cpus in (1, 2, 3, 16):
        for limit in (1, 2, 4, 16):
            for reserved in (0.0, 0.5, 1.0):
                share = game_cpus(limit, cpus, reserved)
                assert 0.1 <= share <= 1.0
                assert share * limit + reserved <= cpus or share == 0.1
    assert game_cpus(1, 16, 0.5) == 1.0  # a game is one thread: no more than a CPU
