"""chessrl.arena.eval_report: the head-to-head table rlaif ends with, and no report, plot or line with a
zero-width interval."""

from __future__ import annotations

import re

import pytest

from chessrl.arena.eval_report import comparison_lines
from chessrl.arena.game import ArenaGame


def game(white: str, black: str, result: str) -> ArenaGame:
    return ArenaGame(
        white=white,
        black=black,
        result=result,
        termination="max_plies",
        moves=[],
        first_attempt_legal={"white": 3, "black": 1},
        player_moves={"white": 4, "black": 4},
    )


def test_ten_draws_give_an_interval_of_non_zero_width_around_zero() -> None:
    games = [game("lm:p", "random", "1/2-1/2"), game("random", "lm:p", "1/2-1/2")] * 5
    lines = comparison_lines(games, ["lm:p", "random"], {"lm:p": "ppo"})
    ppo = next(line for line in lines if line.startswith("ppo "))
    low, high = map(int, re.search(r"\(([-+]\d+) \.\. ([-+]\d+)\)", ppo).groups())
    assert low < 0 < high and "+0 (" in ppo
    assert "ppo            -          +0 =10 -0" in lines


def test_scores_legal_rates_and_the_pairing_matrix_from_each_side() -> None:
    games = [game("lm:p", "sft", "1-0"), game("sft", "lm:p", "1-0"), game("lm:p", "random", "0-1")]
    lines = comparison_lines(games, ["lm:p", "sft", "random"], {"lm:p": "ppo"})
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["ppo"][1:4] == ["3", "33.3%", "58.3%"]  # (3 + 1 + 3) / 12 moves legal at once
    assert rows["sft"][1:4] == ["2", "50.0%", "50.0%"]
    assert rows["random"][1:4] == ["1", "100.0%", "-"]
    assert rows["random"][4:] == ["+0", "(anchor)"]
    matrix = {line.split()[0]: line for line in lines[6:]}
    assert "+1 =0 -1" in matrix["ppo"] and "+0 =0 -1" in matrix["ppo"] and "+1 =0 -0" in matrix["random"]


def test_without_the_anchor_among_the_players_there_is_no_elo() -> None:
    lines = comparison_lines([game("lm:a", "lm:b", "1-0")], ["lm:a", "lm:b"], {})
    assert all(line.rstrip().endswith("-") for line in lines[1:3])


# --- no report, plot or line shows a zero-width interval ----------------------------------------

INTERVAL = re.compile(r"([-+]?\d+(?:\.\d+)?) \.\. ([-+]?\d+(?:\.\d+)?)\)")


def assert_no_zero_width(text: str) -> None:
    for low, high in INTERVAL.findall(text):
        assert float(low) < float(high), text
    assert "(+0 .. +0)" not in text and "(1350 .. 1350)" not in text


def arena_results(draws: int = 10) -> dict:
    """An arena's results as evaluate's ``summarize`` builds them: ten draws against random, ten
    losses against Stockfish, the candidate rated with a UCI_Elo anchor and two ladder rungs fixed."""
    from chessrl.arena.rating import match_elo, rate_players

    pairings = {}
    for opp, (w, d, lost) in {"random": (0, draws, 0), "stockfish:elo=1350": (0, 1, 9)}.items():
        est = match_elo(w, d, lost)
        pairings[opp] = {
            "wins": w,
            "draws": d,
            "losses": lost,
            "games": est.games,
            "score": est.score,
            "elo_diff": est.elo,
            "elo_low": est.low,
            "elo_high": est.high,
        }
    games = [("sft", "random", 0.5)] * draws + [("sft", "stockfish:elo=1350", 0.0)] * 9
    games += [("sft", "stockfish:elo=1350", 0.5)]
    anchors = {"stockfish:elo=1350": 1350.0, "random": 400.0}
    fitted = rate_players(games, anchors)
    ratings = {
        k: {f: getattr(v, f) for f in ("elo", "low", "high", "games", "score", "anchored")}
        for k, v in fitted.items()
    }
    ladder = {
        "stockfish": "Stockfish 15.1",
        "games": 80,
        "candidate_games": 20,
        "placement_games": 20,
        "match_games": 0,
        "informative": [],
        "calibration_played": 0,
        "ratings": {
            "random": (400.0, 400.0, 400.0),  # swept every game: its one-sided bound
            "stockfish:elo=1350,nodes=1000,random=50": (900.0, 700.0, 1100.0),
            "stockfish:elo=1350": (1350.0, 1350.0, 1350.0),
        },
    }
    return {
        "candidate": "sft",
        "players": ["sft", *pairings],
        "games": draws + 10,
        "ladder_games": 0,
        "pairings": pairings,
        "ratings": ratings,
        "anchors": anchors,
        "ladder": ladder,
        "candidate_moves": {
            "moves": 100,
            "first_attempt_legal": 80,
            "illegal_attempts": 20,
            "fallbacks": 5,
            "legal_rate": 0.8,
        },
        "suites": [],
        "quality": None,
        "results": {},
    }


def test_the_arena_summary_and_report_show_ten_draws_with_width() -> None:
    from chessrl.arena.eval_report import report_markdown, summary_lines

    results = arena_results()
    lines = summary_lines(results, "report.md", "games.pgn")
    random_line = next(line for line in lines if "vs random" in line)
    assert "Elo diff +0 (-99 .. +99)" in random_line
    report = report_markdown(results, "gauntlet", 200, "random")
    assert "| random | 10 | 0 | 10 | 0 | 50.0% | +0 (-99 .. +99) |" in report
    # anchored players and the ladder's fixed rungs are "fixed", not "1350 (1350 .. 1350)"
    assert "| stockfish:elo=1350 | 1350 (fixed) |" in report
    assert "| random | 400 (a one-sided 95% bound; no interval) |" in report
    assert "| stockfish:elo=1350,nodes=1000,random=50 | 900 (700 .. 1100) |" in report
    for text in ("\n".join(lines), report):
        assert_no_zero_width(text)


def test_pairings_without_the_candidate_are_reported_too() -> None:
    """``--pairs 1-2`` or ``round_robin``: the games between two other players reach the summary
    and the report, from the side of the one named first (an evaluate run once printed only the
    candidate's rows, and a start's own score against a random mover was lost)."""
    from chessrl.arena.eval_report import other_pairings, report_markdown, summary_lines

    def game(white: str, black: str, result: str) -> ArenaGame:
        return ArenaGame(white=white, black=black, result=result, termination="checkmate", moves=[])

    games = [
        game("lm:new", "random", "1-0"),
        game("random", "lm:start", "1-0"),
        game("lm:start", "random", "1/2-1/2"),
    ]
    results = {**arena_results(), "other_pairings": other_pairings(["lm:new", "lm:start", "random"], games)}
    assert list(results["other_pairings"]) == ["lm:start vs random"]
    pair = results["other_pairings"]["lm:start vs random"]
    assert (pair["wins"], pair["draws"], pair["losses"], pair["score"]) == (0, 1, 1, 0.25)
    line = next(line for line in summary_lines(results, "r", "g") if "lm:start vs random" in line)
    assert "+0 =1 -1  score 25.0%" in line
    assert "| lm:start vs random | 2 | 0 | 1 | 1 | 25.0% |" in report_markdown(
        results, "gauntlet", 200, "random"
    )


def test_the_score_plot_draws_the_one_interval(tmp_path, monkeypatch) -> None:
    import matplotlib.axes

    from chessrl.arena.eval_report import plot
    from chessrl.arena.rating import score_interval

    bars = []
    real = matplotlib.axes.Axes.errorbar

    def record(self, x, y, yerr=None, **kwargs):
        bars.append((y, yerr))
        return real(self, x, y, yerr=yerr, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", record)
    results = arena_results()
    paths = plot(results, tmp_path)
    assert [p.name for p in paths] == ["score.png", "elo.png"] and all(p.stat().st_size > 0 for p in paths)
    (y0, ((down0,), (up0,))), (y1, ((down1,), (up1,))) = bars[:2]  # random, then stockfish
    s, low, high = score_interval(0, 10, 0)
    assert (y0, down0, up0) == pytest.approx((0.5, s - low, high - s)) and down0 > 0.1 and up0 > 0.1
    s, low, high = score_interval(0, 1, 9)
    assert (y1, down1, up1) == pytest.approx((s, s - low, high - s)) and up1 > 0.1
    # the Elo plot: only the candidate has an interval (the anchors are fixed squares), and it has width
    for _, ((down,), (up,)) in bars[2:]:
        assert down + up > 0


def test_the_sprt_report_of_even_pairs_has_width() -> None:
    from chessrl.arena.eval_report import sprt_markdown, sprt_summary_lines
    from chessrl.arena.rating import pentanomial_elo
    from chessrl.arena.sprt import sprt_pentanomial

    counts = (0, 0, 10, 0, 0)  # ten pairs, each 1-1
    est, test = pentanomial_elo(counts), sprt_pentanomial(counts, 0, 20)
    sprt = {
        "elo0": 0,
        "elo1": 20,
        "alpha": 0.05,
        "beta": 0.05,
        "max_games": 20,
        "pairs": 10,
        "games": 20,
        "pentanomial": list(counts),
        "llr": test.llr,
        "lower": test.lower,
        "upper": test.upper,
        "decision": test.decision,
        "trajectory": [],
        "wins": 0,
        "draws": 20,
        "losses": 0,
        "score": est.score,
        "elo": est.elo,
        "elo_low": est.low,
        "elo_high": est.high,
    }
    results = {"mode": "sprt", "players": ["a", "b"], "sprt": sprt, "games": 20}
    lines = sprt_summary_lines(results, "report.md")
    assert "  Elo diff      +0 (-99 .. +99)" in lines
    for text in ("\n".join(lines), sprt_markdown(results)):
        assert_no_zero_width(text)


def test_the_reports_say_where_the_openings_came_from_and_whom_a_model_trained_against() -> None:
    from chessrl.arena.eval_report import report_markdown, sprt_markdown

    table = "s3://b/r/prepare/games"
    openings = {"source": "heldout", "seed": 7, "plies": [6, 12], "from": table, "count": 120}
    note = "note: lm:g trained against random (its own-games opponent): this match is partly in-distribution"
    results = {**arena_results(), "openings": openings, "training_opponents": {"lm:g": ["random", "self"]}}
    report = report_markdown(results, "gauntlet", 200, results["openings"])
    assert f"Openings: 120 positions at plies 6-12 of held-out games of {table}, seed 7." in report
    assert "- `lm:g` trained against `random`, `self` in its own games (grpo.own_opponent)" in report
    random_ones = {
        "source": "random",
        "seed": 3,
        "plies": 4,
        "from": None,
        "count": 10,
        "fallback": "no games table at t",
    }
    sprt = {
        "elo0": 0,
        "elo1": 20,
        "alpha": 0.05,
        "beta": 0.05,
        "max_games": 20,
        "pairs": 10,
        "games": 20,
        "pentanomial": [0, 0, 10, 0, 0],
        "llr": 0.0,
        "lower": -2.9,
        "upper": 2.9,
        "decision": "continue",
        "trajectory": [],
        "wins": 0,
        "draws": 20,
        "losses": 0,
        "score": 0.5,
        "elo": 0.0,
        "elo_low": -99.0,
        "elo_high": 99.0,
    }
    text = sprt_markdown(
        {
            "mode": "sprt",
            "players": ["lm:g", "random"],
            "sprt": sprt,
            "games": 20,
            "openings": random_ones,
            "training_opponents": {"lm:g": ["random"]},
            "notes": [note],
        }
    )
    assert "Openings: 10 positions of 4 seeded random plies, seed 3 (no held-out openings: " in text
    assert "(no held-out openings: no games table at t)." in text
    assert f"- {note}" in text and "- `lm:g` trained against `random`" in text
    assert "Openings" not in sprt_markdown({"mode": "sprt", "players": ["a", "b"], "sprt": sprt, "games": 20})


@pytest.mark.parametrize(
    ("elo", "low", "high", "text"),
    [
        (0.0, -0.3, 0.4, "+0.0 (-0.3 .. +0.4)"),  # narrower than 1 Elo: decimals, not "+0 (+0 .. +0)"
        (0.0, -0.004, 0.002, "+0.000 (-0.004 .. +0.002)"),
        (20.2, 19.8, 20.6, "+20.2 (+19.8 .. +20.6)"),
        (-5.0, -60.0, 40.0, "-5 (-60 .. +40)"),
        (1350.0, 1350.0, 1350.0, "+1350 (fixed)"),
    ],
)
def test_fmt_estimate_never_prints_a_zero_width_interval(elo, low, high, text) -> None:
    from chessrl.arena.eval_report import fmt_estimate

    assert fmt_estimate(elo, low, high) == text
