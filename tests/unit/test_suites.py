"""EPD test suites (the real WAC and Bratko-Kopec files), running a player on them, and the
move-quality measures (win%, Lichess accuracy, ACPL)."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import chess
import pytest

from chessrl.arena.players import MoveChoice, RandomPlayer
from chessrl.arena.suites import (
    CP_CAP,
    MoveQuality,
    SuitePosition,
    move_accuracy,
    move_quality,
    parse_epd_lines,
    read_epd_suite,
    run_suite,
    win_percent,
)
from cluster.errors import InputDataError

EPD_DIR = Path(__file__).resolve().parents[1] / "data" / "epd"
WAC = EPD_DIR / "wac.epd"
BRATKO_KOPEC = EPD_DIR / "bratko-kopec.epd"


def non_empty_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def expected_best(line: str) -> set[str]:
    """The ``bm`` moves of an EPD line in UCI, read here with a regular expression and SAN."""
    board = chess.Board(" ".join(line.split()[:4]))
    operand = re.search(r"\bbm\s+([^;]+);", line).group(1)
    sans = operand.replace(" +", "+").split()
    return {board.parse_san(san).uci() for san in sans}


# ---------------------------------------------------------------------------------------------
# reading suites


@pytest.mark.parametrize(("path", "prefix"), [(WAC, "WAC."), (BRATKO_KOPEC, "BK.")])
def test_real_suites_read_completely_and_every_best_move_is_legal(path: Path, prefix: str) -> None:
    lines = non_empty_lines(path)
    suite = read_epd_suite(path)
    assert len(suite) == len(lines)
    assert len({p.id for p in suite}) == len(suite)
    for line, pos in zip(lines, suite, strict=True):
        board = chess.Board(pos.fen)
        assert board.board_fen() == line.split()[0]
        assert board.turn == (line.split()[1] == "w")
        assert pos.id.startswith(prefix) and pos.id in line
        assert pos.best and not pos.avoid
        for uci in pos.best:
            assert chess.Move.from_uci(uci) in board.legal_moves, (pos.id, uci)
        assert set(pos.best) == expected_best(line), pos.id


def test_known_positions_of_the_real_suites() -> None:
    bk = {p.id: p for p in read_epd_suite(BRATKO_KOPEC)}
    assert bk["BK.01"].best == ("d6d1",)  # "bm Qd1 +": the black queen from d6
    assert set(bk["BK.05"].best) == {"c3d5", "a2a4"}  # "bm Nd5 a4"
    wac = {p.id: p for p in read_epd_suite(WAC)}
    assert wac["WAC.001"].best == ("g3g6",)
    assert wac["WAC.114"].best == ("d3h7",)  # its pv is cut short mid-move, the bm is fine


def test_solved_by_best_and_avoid_moves() -> None:
    start = chess.Board().fen()
    bm = SuitePosition(start, best=("e2e4", "d2d4"), avoid=(), id="bm")
    assert bm.solved_by("e2e4") and bm.solved_by("d2d4")
    assert not bm.solved_by("g1f3") and not bm.solved_by(None)
    am = SuitePosition(start, best=(), avoid=("e2e4",), id="am")
    assert am.solved_by("d2d4") and am.solved_by("g1f3")
    assert not am.solved_by("e2e4") and not am.solved_by(None)
    both = SuitePosition(start, best=("d2d4", "e2e4"), avoid=("e2e4",), id="both")
    assert both.solved_by("d2d4") and not both.solved_by("e2e4") and not both.solved_by("c2c4")


def test_parse_epd_lines_reads_am_ids_and_skips_blank_and_comment_lines() -> None:
    lines = [
        "# a comment",
        "",
        'rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - am f3 g4; id "avoid";',
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - bm e4; am a3;",
    ]
    first, second = parse_epd_lines(lines, "dir/mine.epd")
    assert (first.best, set(first.avoid), first.id) == ((), {"f2f3", "g2g4"}, "avoid")
    assert (second.best, second.avoid) == (("e2e4",), ("a2a3",))
    assert second.id == "mine-4"  # no id: the file's stem and the line number
    assert first.fen == chess.Board().fen()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("not an epd line at all", "not an EPD position"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR x KQkq - bm e4;", "not an EPD position"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - bm e5;", "not an EPD position"),
        ('rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - id "nothing to test";', "bm or am"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -", "bm or am"),
    ],
)
def test_a_bad_line_is_an_input_data_error_naming_file_and_line(tmp_path, line: str, why: str) -> None:
    path = tmp_path / "suite.epd"
    good = non_empty_lines(WAC)[0]
    path.write_text(f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(InputDataError, match=re.escape(f"{path}:3: ") + ".*" + why):
        read_epd_suite(path)


def test_a_missing_suite_is_an_input_data_error(tmp_path) -> None:
    with pytest.raises(InputDataError, match=re.escape(str(tmp_path / "nope.epd"))):
        read_epd_suite(tmp_path / "nope.epd")


# ---------------------------------------------------------------------------------------------
# running a player on a suite


class Oracle:
    """Plays the first best move of whichever suite position it is shown."""

    name = "oracle"

    def __init__(self, positions: list[SuitePosition]) -> None:
        self.best = {p.fen: p.best[0] for p in positions}

    def new_game(self, seed: int) -> None:
        pass

    def move(self, board: chess.Board) -> MoveChoice:
        assert not board.move_stack  # a suite position is played from its FEN, with no history
        return MoveChoice(self.best[board.fen()])

    def close(self) -> None:
        pass


class Forfeiter(Oracle):
    def move(self, board: chess.Board) -> MoveChoice:
        return MoveChoice(None, illegal_attempts=1, first_attempt_legal=False)


def test_a_player_that_plays_the_best_move_solves_everything() -> None:
    suite = read_epd_suite(WAC)
    result = run_suite(Oracle(suite), "wac", suite)
    assert (result.name, result.positions, result.solved) == ("wac", len(suite), len(suite))
    assert result.accuracy == 1.0 and result.failed_ids == ()
    assert result.legal_first_attempt == len(suite)


def test_a_random_player_solves_less_and_its_failures_are_listed() -> None:
    suite = read_epd_suite(WAC)
    result = run_suite(RandomPlayer(), "wac", suite, seed=1)
    assert result.solved < len(suite) // 4
    assert result.solved + len(result.failed_ids) == len(suite)
    assert result.accuracy == pytest.approx(result.solved / len(suite))
    # the failures are exactly the positions whose seeded random move is not a best move
    expected_failed = []
    for i, pos in enumerate(suite):
        rng = random.Random(1 + i)
        move = rng.choice(sorted(m.uci() for m in chess.Board(pos.fen).legal_moves))
        if move not in pos.best:
            expected_failed.append(pos.id)
    assert list(result.failed_ids) == expected_failed
    assert run_suite(RandomPlayer(), "wac", suite, seed=1) == result


def test_a_forfeiting_player_solves_nothing() -> None:
    suite = read_epd_suite(BRATKO_KOPEC)
    result = run_suite(Forfeiter(suite), "bk", suite)
    assert (result.solved, result.legal_first_attempt, result.accuracy) == (0, 0, 0.0)
    assert result.failed_ids == tuple(p.id for p in suite)
    assert run_suite(Forfeiter(suite), "none", []).accuracy == 0.0


# ---------------------------------------------------------------------------------------------
# move quality


def lichess_win(cp: float) -> float:
    """Lichess's win% written as a tanh (the same curve as 2 / (1 + e^-x) - 1), capped at CP_CAP."""
    cp = max(-CP_CAP, min(CP_CAP, cp))
    return 50 + 50 * math.tanh(0.00368208 * cp / 2)


def test_win_percent_is_even_symmetric_monotone_and_capped() -> None:
    assert win_percent(0) == pytest.approx(50.0)
    values = [win_percent(cp) for cp in range(-1200, 1201, 25)]
    assert all(a <= b for a, b in zip(values, values[1:], strict=False))  # flat beyond the cap
    inside = [win_percent(cp) for cp in range(-CP_CAP, CP_CAP + 1, 25)]
    assert all(a < b for a, b in zip(inside, inside[1:], strict=False))
    for cp in (1, 35, 100, 300, 999, 1000, 5000):
        assert win_percent(cp) + win_percent(-cp) == pytest.approx(100.0)
        assert win_percent(cp) == pytest.approx(lichess_win(cp))
    assert win_percent(5000) == win_percent(CP_CAP) == win_percent(100_000)
    assert win_percent(-5000) == win_percent(-CP_CAP)
    assert 0 < win_percent(-CP_CAP) < win_percent(CP_CAP) < 100
    assert win_percent(100) == pytest.approx(59.10, abs=0.01)  # +1 pawn: about 59%


def test_move_accuracy_is_full_without_loss_and_falls_with_it() -> None:
    for win in (0.0, 25.0, 50.0, 97.5):
        assert move_accuracy(win, win) == pytest.approx(100.0, abs=1e-3)
        assert move_accuracy(win, min(100.0, win + 10)) == pytest.approx(100.0, abs=1e-3)  # a gain is no loss
    losses = [0, 1, 5, 10, 20, 40, 60]
    accuracies = [move_accuracy(80.0, 80.0 - loss) for loss in losses]
    assert all(a > b for a, b in zip(accuracies, accuracies[1:], strict=False))
    assert move_accuracy(100.0, 0.0) == 0.0  # clipped at 0
    assert all(0.0 <= move_accuracy(b, a) <= 100.0 for b in (0, 30, 100) for a in (0, 30, 100))
    # by hand: a 10-point drop is 103.1668 * e^-0.4354 - 3.1669
    assert move_accuracy(60.0, 50.0) == pytest.approx(103.1668 * math.exp(-0.4354) - 3.1669)


def test_move_quality_on_hand_worked_pairs() -> None:
    pairs = [(50, 50), (100, -100), (0, -5000)]
    # losses: 0, 200, and 5000 capped at CP_CAP = 1000
    assert CP_CAP == 1000
    quality = move_quality(pairs)
    assert quality.moves == 3
    assert quality.acpl == pytest.approx((0 + 200 + 1000) / 3) == 400.0
    # accuracies: ~100; 59.10% -> 40.90% (an 18.2-point drop): ~43.5; 50% -> 2.46%: ~9.85
    assert quality.accuracy == pytest.approx((99.9999 + 43.53 + 9.85) / 3, abs=0.02)


def test_move_quality_ignores_gains_and_handles_no_moves() -> None:
    gain = move_quality([(0, 80), (-300, -300)])  # a move better than the engine's best is no loss
    assert gain.acpl == 0.0
    assert gain.accuracy == pytest.approx(100.0, abs=1e-3)
    assert move_quality([]) == MoveQuality(0, 0.0, 0.0)
    one = move_quality([(30, -70)])
    assert one.acpl == 100.0
    assert one.accuracy == pytest.approx(move_accuracy(lichess_win(30), lichess_win(-70)))
