"""Elo arithmetic against hand-worked numbers: expected scores, match intervals, maximum-likelihood
ratings with anchors, and the SPRT."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from chessrl.arena.rating import (
    EloEstimate,
    PlayerRating,
    elo_from_score,
    expected_score,
    match_elo,
    pentanomial_elo,
    rate_players,
    score_bounds,
    score_interval,
)
from chessrl.arena.sprt import PENTANOMIAL_EPSILON, pair_counts, pentanomial_llr, sprt, sprt_pentanomial

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal


def games_between(a: str, b: str, wins: int, draws: int, losses: int) -> list[tuple[str, str, float]]:
    """``a``'s results against ``b``, colours alternating."""
    results = [1.0] * wins + [0.5] * draws + [0.0] * losses
    return [(a, b, s) if i % 2 == 0 else (b, a, 1 - s) for i, s in enumerate(results)]


# --- expected_score / elo_from_score -------------------------------------------------------------


def test_expected_score_hand_values() -> None:
    assert expected_score(0) == 0.5
    assert expected_score(400) == pytest.approx(10 / 11)  # odds of 10 to 1
    assert expected_score(-400) == pytest.approx(1 / 11)
    assert expected_score(100) + expected_score(-100) == pytest.approx(1)


def test_expected_score_does_not_overflow_far_out() -> None:
    assert expected_score(1e6) == 1.0
    assert expected_score(-1e6) == 0.0
    assert expected_score(math.inf) == 1.0 and expected_score(-math.inf) == 0.0


def test_elo_from_score_inverts_expected_score() -> None:
    assert elo_from_score(0.5) == 0.0 and math.copysign(1, elo_from_score(0.5)) == 1  # not -0.0
    assert elo_from_score(10 / 11) == pytest.approx(400)
    assert elo_from_score(0.75) == pytest.approx(190.85, abs=0.005)
    for diff in (-700.0, -35.5, 1.0, 250.0):
        assert elo_from_score(expected_score(diff)) == pytest.approx(diff)


@pytest.mark.parametrize("score", [0.0, 1.0, -0.2, 1.5])
def test_elo_from_score_rejects_scores_outside_the_open_interval(score: float) -> None:
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        elo_from_score(score)


# --- score_bounds / score_interval / match_elo ---------------------------------------------------

K95 = Z95 * Z95 / 2  # pseudo-outcomes at 0 and at 1 each (Agresti-Coull)


def augmented(outcomes: dict[float, float]) -> tuple[float, float]:
    """The interval of score_bounds recomputed from its definition: the sample plus K95
    pseudo-outcomes at 0 and K95 at 1, mean ± z·sqrt(variance / size) of that sample."""
    size = sum(outcomes.values()) + 2 * K95
    mean = (sum(x * c for x, c in outcomes.items()) + K95) / size
    var = (sum(c * (x - mean) ** 2 for x, c in outcomes.items()) + K95 * (mean**2 + (1 - mean) ** 2)) / size
    half = Z95 * math.sqrt(var / size)
    return mean - half, mean + half


def test_score_interval_even_match_by_hand() -> None:
    # W=10 D=0 L=10 plus 1.92 pseudo-wins and 1.92 pseudo-losses: 23.84 outcomes, mean 0.5,
    # variance 0.25, se = 0.5/sqrt(23.84) = 0.1024; half-width 1.96·0.1024 = 0.2007 -> [0.2993, 0.7007]
    s, low, high = score_interval(10, 0, 10)
    half = Z95 * 0.5 / math.sqrt(20 + Z95**2)
    assert s == 0.5
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert (low, high) == pytest.approx((0.2993, 0.7007), abs=1e-4)


def test_score_interval_with_draws_by_hand() -> None:
    # W=30 D=40 L=10: s = 50/80 = 0.625; augmented: 83.84 outcomes, mean (50 + 1.9207)/83.84 = 0.61927,
    # variance 0.11650, half-width 1.96·sqrt(0.11650/83.84) = 0.07306 -> [0.5462, 0.6923]
    s, low, high = score_interval(30, 40, 10)
    assert s == 0.625
    assert (low, high) == pytest.approx(augmented({1: 30, 0.5: 40, 0: 10}))
    assert (low, high) == pytest.approx((0.5462, 0.6923), abs=1e-4)


def test_score_interval_is_clipped_and_follows_confidence() -> None:
    # W=9 L=1: augmented mean 10.92/13.84 = 0.789, half-width 0.215 -> high clipped to 1
    assert score_interval(9, 0, 1)[2] == 1.0
    narrow, wide = score_interval(10, 5, 10, confidence=0.5), score_interval(10, 5, 10, confidence=0.99)
    assert wide[1] < narrow[1] < narrow[2] < wide[2]


def test_score_interval_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one game"):
        score_interval(0, 0, 0)
    with pytest.raises(ValueError, match=">= 0"):
        score_interval(3, -1, 2)
    with pytest.raises(ValueError, match="confidence"):
        score_interval(3, 1, 2, confidence=1.0)
    with pytest.raises(ValueError, match="at least one game"):
        score_bounds({1: 0, 0: 0})
    with pytest.raises(ValueError, match="scores in \\[0, 1\\]"):
        score_bounds({1.5: 3})
    with pytest.raises(ValueError, match="counts >= 0"):
        score_bounds([(0.5, -1)])


def test_score_interval_is_score_bounds_of_the_games() -> None:
    for wins, draws, losses in ((30, 40, 10), (0, 10, 0), (7, 0, 0), (0, 0, 3), (1, 2, 0)):
        assert score_interval(wins, draws, losses) == score_bounds({1: wins, 0.5: draws, 0: losses})
        assert score_bounds([(1.0, wins), (0.5, draws), (0.0, losses)], 0.9) == score_interval(
            wins, draws, losses, confidence=0.9
        )


def test_ten_draws_give_a_non_zero_interval_around_zero_elo() -> None:
    # 10 draws + 1.92 pseudo-wins + 1.92 pseudo-losses: mean 0.5, variance 3.84·0.25/13.84 = 0.0694,
    # half-width 1.96·sqrt(0.0694/13.84) = 0.1388 -> [0.3612, 0.6388], ±99.0 Elo
    s, low, high = score_interval(0, 10, 0)
    assert s == 0.5 and (low, high) == pytest.approx(augmented({0.5: 10}))
    assert (low, high) == pytest.approx((0.3612, 0.6388), abs=1e-4)
    assert 0.5 - low == pytest.approx(high - 0.5)
    est = match_elo(0, 10, 0)
    assert est.elo == 0.0 and est.low < -90 and est.high > 90
    assert est.low == pytest.approx(-est.high) and est.high == pytest.approx(99.0, abs=0.05)


def test_all_draws_narrow_as_games_add_up_but_never_vanish() -> None:
    widths = [match_elo(0, n, 0).high - match_elo(0, n, 0).low for n in (1, 2, 3, 10, 100, 1000)]
    assert widths == sorted(widths, reverse=True) and widths[-1] > 0
    assert widths[0] == pytest.approx(2 * 375.5, abs=0.5)  # one draw: 0 within ±375 Elo


def test_all_wins_and_all_losses_use_the_exact_one_sided_bound() -> None:
    for n in (1, 2, 3, 10, 100):
        exact = 0.025 ** (1 / n)  # n straight wins have probability 2.5% at a score of `exact`
        assert score_interval(n, 0, 0) == pytest.approx((1.0, exact, 1.0))
        assert score_interval(0, 0, n) == pytest.approx((0.0, 0.0, 1 - exact))
        # the normal interval on the augmented sample is dishonest at small n (one win: low 0.17)
        # and wider at large n: the exact bound is the one to keep
        agresti_low = augmented({1: n})[0]
        assert exact < agresti_low if n <= 6 else exact > agresti_low
    ten = match_elo(10, 0, 0)
    assert (ten.elo, ten.high) == (math.inf, math.inf)
    assert ten.low == pytest.approx(elo_from_score(0.025**0.1))
    assert ten.low == pytest.approx(140.2, abs=0.05)
    nil = match_elo(0, 0, 10)
    assert (nil.elo, nil.low) == (-math.inf, -math.inf) and nil.high == pytest.approx(-ten.low)


def test_small_samples() -> None:
    one_win, one_draw, one_loss = match_elo(1, 0, 0), match_elo(0, 1, 0), match_elo(0, 0, 1)
    # one win: only "better than a player scoring 2.5%", -636 Elo
    assert one_win.low == pytest.approx(elo_from_score(0.025))
    assert one_win.low == pytest.approx(-636.4, abs=0.05)
    assert one_loss.high == pytest.approx(-one_win.low)
    # one draw: 4.84 outcomes, mean 0.5, variance 3.84·0.25/4.84 = 0.198, half-width
    # 1.96·sqrt(0.198/4.84) = 0.397 -> [0.103, 0.897]: 0 within ±375 Elo
    assert one_draw.elo == 0.0 and one_draw.low == pytest.approx(-one_draw.high)
    assert one_draw.high == pytest.approx(375.5, abs=0.05)
    # two games, one each way: 0 within ±393 Elo
    split = match_elo(1, 0, 1)
    assert split.elo == 0.0 and split.low == pytest.approx(-split.high)
    assert split.high == pytest.approx(392.5, abs=0.05)
    # three games, +2 =1: 83.3%, +280 Elo, in (-133 .. +634)
    three = match_elo(2, 1, 0)
    assert three.elo == pytest.approx(279.6, abs=0.05)
    assert (three.low, three.high) == pytest.approx((-132.7, 633.5), abs=0.05)
    for est in (one_win, one_draw, one_loss, split, three, match_elo(0, 2, 1), match_elo(1, 1, 1)):
        assert est.low < est.high and est.low <= est.elo <= est.high


def test_the_interval_contains_the_score_and_has_width_for_every_small_match() -> None:
    rng = random.Random(7)
    matches = [(w, d, n - w - d) for n in range(1, 31) for w in range(n + 1) for d in range(n + 1 - w)]
    for wins, draws, losses in rng.sample(matches, 500) + [(0, n, 0) for n in range(1, 31)]:
        s, low, high = score_interval(wins, draws, losses)
        assert 0 <= low <= s <= high <= 1 and low < high, (wins, draws, losses)
        est = match_elo(wins, draws, losses)
        assert est.low <= est.elo <= est.high and est.low < est.high, (wins, draws, losses)


def test_large_samples_agree_with_the_textbook_trinomial_interval() -> None:
    for wins, draws, losses in ((400, 300, 300), (500, 0, 500), (100, 800, 100), (700, 250, 50)):
        n = wins + draws + losses
        s = (wins + draws / 2) / n
        var = (wins * (1 - s) ** 2 + draws * (0.5 - s) ** 2 + losses * s**2) / n
        textbook = 2 * Z95 * math.sqrt(var / n)
        score, low, high = score_interval(wins, draws, losses)
        assert score == s
        assert high - low == pytest.approx(textbook, rel=0.03)
        assert (low + high) / 2 == pytest.approx(s, abs=0.002)


def test_win_loss_coverage_is_nominal_on_average() -> None:
    """Exact binomial coverage of the 95% interval, averaged over true scores 0.01 .. 0.99."""
    for n in (1, 2, 3, 5, 10, 20, 30):
        intervals = [score_interval(w, 0, n - w) for w in range(n + 1)]
        coverage = []
        for p in (i / 100 for i in range(1, 100)):
            coverage.append(
                sum(
                    math.comb(n, w) * p**w * (1 - p) ** (n - w)
                    for w, (_, low, high) in enumerate(intervals)
                    if low <= p <= high
                )
            )
        assert sum(coverage) / len(coverage) >= 0.95, n
        assert min(coverage) >= 0.8, n


def test_match_elo_even_match_is_zero_and_symmetric() -> None:
    est = match_elo(10, 0, 10)
    assert est.elo == 0.0
    # high = -400·log10(1/0.7007 - 1) = 147.8
    high = -400 * math.log10(1 / (0.5 + Z95 * 0.5 / math.sqrt(20 + Z95**2)) - 1)
    assert est.high == pytest.approx(high)
    assert est.high == pytest.approx(147.8, abs=0.05)
    assert est.low == pytest.approx(-est.high)
    assert est == EloEstimate(est.elo, est.low, est.high, 0.5, 20, 10, 0, 10)


def test_five_wins_five_losses() -> None:
    # 13.84 outcomes, variance 0.25: half-width 1.96·0.5/sqrt(13.84) = 0.2634 -> [0.2366, 0.7634], ±203.5 Elo
    est = match_elo(5, 0, 5)
    assert (est.score, est.elo) == (0.5, 0.0)
    assert est.high == pytest.approx(203.5, abs=0.05) and est.low == pytest.approx(-est.high)


def test_match_elo_maps_score_bounds_through_elo_from_score() -> None:
    est = match_elo(30, 40, 10, confidence=0.9)
    s, low, high = score_interval(30, 40, 10, confidence=0.9)
    assert (est.elo, est.low, est.high) == pytest.approx(tuple(elo_from_score(x) for x in (s, low, high)))


def test_match_elo_infinite_where_a_score_bound_is_zero_or_one() -> None:
    assert (match_elo(1, 0, 9).low, match_elo(9, 0, 1).high) == (-math.inf, math.inf)
    assert math.isfinite(match_elo(1, 0, 9).high)
    perfect, nil = match_elo(5, 0, 0), match_elo(0, 0, 5)
    assert (perfect.elo, perfect.high) == (math.inf,) * 2
    assert (nil.elo, nil.low) == (-math.inf,) * 2
    # the finite side is the exact one-sided bound: 5 straight wins at p = 0.025^(1/5) = 0.4784
    assert perfect.low == pytest.approx(elo_from_score(0.025 ** (1 / 5))) == pytest.approx(-15.2, abs=0.1)
    assert nil.high == pytest.approx(-perfect.low)


# --- rate_players --------------------------------------------------------------------------------


def test_even_score_against_one_anchor_matches_match_elo() -> None:
    games = games_between("p", "sf", 500, 0, 500)
    p = rate_players(games, anchors={"sf": 1500})["p"]
    assert p.elo == pytest.approx(1500, abs=1e-6)
    # Fisher information per game (ln10/400)²·p(1-p) = (ln10/400)²/4, so se = 400/(ln10·0.5·sqrt(1000))
    half = Z95 * 400 / (math.log(10) * 0.5 * math.sqrt(1000))
    assert (p.low, p.high) == pytest.approx((1500 - half, 1500 + half))
    # the same interval as match_elo's up to the delta method's linearization (0.03 Elo here)
    est = match_elo(500, 0, 500)
    assert (p.low, p.high) == pytest.approx((1500 + est.low, 1500 + est.high), abs=0.1)


def test_seventy_five_percent_against_an_anchor() -> None:
    games = games_between("p", "sf", 75, 0, 25)
    p = rate_players(games, anchors={"sf": 1000})["p"]
    assert p.elo == pytest.approx(1000 + elo_from_score(0.75), abs=1e-6)
    assert p.elo == pytest.approx(1190.85, abs=0.01)
    assert (p.games, p.score, p.anchored) == (100, 0.75, False)
    assert p.low < p.elo < p.high


def test_draws_count_as_half_wins() -> None:
    # 50 wins + 50 draws = 75% too
    games = games_between("p", "sf", 50, 50, 0)
    assert rate_players(games, anchors={"sf": 1000})["p"].elo == pytest.approx(1000 + elo_from_score(0.75))


def test_even_score_against_two_anchors_lands_between_them() -> None:
    # 20·(0.5 - E(r-1000)) + 20·(0.5 - E(r-1400)) = 0 holds at r = 1200 by symmetry
    games = games_between("p", "low", 8, 4, 8) + games_between("p", "high", 10, 0, 10)
    table = rate_players(games, anchors={"low": 1000, "high": 1400})
    assert table["p"].elo == pytest.approx(1200, abs=1e-6)
    assert table["low"] == PlayerRating("low", 1000.0, 1000.0, 1000.0, 20, 0.5, True)
    assert list(table) == ["high", "p", "low"]  # strongest first


def synthetic_league(seed: int) -> tuple[dict[str, float], list[tuple[str, str, float]]]:
    truth = {
        "sf1000": 1000.0,
        "sf1600": 1600.0,
        "a": 850.0,
        "b": 1150.0,
        "c": 1320.0,
        "d": 1480.0,
        "e": 1750.0,
    }
    rng = random.Random(seed)
    games = []
    names = sorted(truth)
    for i, white in enumerate(names):
        for black in names[i + 1 :]:
            p = expected_score(truth[white] - truth[black])
            draw = 0.5 * min(p, 1 - p)  # draws keep the expected score at p
            for _ in range(150):
                u = rng.random()
                score = 1.0 if u < p - draw / 2 else 0.5 if u < p + draw / 2 else 0.0
                games.append((white, black, score) if rng.random() < 0.5 else (black, white, 1 - score))
    return truth, games


def test_synthetic_league_recovers_known_ratings() -> None:
    truth, games = synthetic_league(seed=1)
    table = rate_players(games, anchors={"sf1000": 1000, "sf1600": 1600})
    for name, rating in truth.items():
        p = table[name]
        assert p.low <= rating <= p.high, p
        assert p.high - p.low < 100 if not p.anchored else p.low == p.high == rating
    assert list(table) == sorted(truth, key=truth.get, reverse=True)


def test_synthetic_league_intervals_cover_the_truth_about_95_percent_of_the_time() -> None:
    covered = checked = 0
    for seed in range(100, 150):
        truth, games = synthetic_league(seed)
        table = rate_players(games, anchors={"sf1000": 1000, "sf1600": 1600})
        for name, rating in truth.items():
            if not table[name].anchored:
                checked += 1
                covered += table[name].low <= rating <= table[name].high
    # 0.964 for these seeds: a little above 0.95, as draws make the true variance smaller
    assert 0.92 <= covered / checked <= 0.99


def test_results_do_not_depend_on_game_order_or_colours() -> None:
    _, games = synthetic_league(seed=3)
    anchors = {"sf1000": 1000, "sf1600": 1600}
    table = rate_players(games, anchors)
    shuffled = games[:]
    random.Random(0).shuffle(shuffled)
    assert rate_players(shuffled, anchors) == table
    flipped = [(black, white, 1 - score) for white, black, score in games]
    assert rate_players(flipped, anchors) == table


def test_perfect_and_nil_scores_are_infinite_with_a_one_sided_bound() -> None:
    games = (
        games_between("x", "sf", 10, 0, 0)  # x won everything
        + games_between("y", "sf", 10, 0, 10)
        + games_between("x", "y", 4, 0, 0)
        + games_between("w", "sf", 0, 0, 6)  # w lost everything
    )
    table = rate_players(games, anchors={"sf": 1500})
    x, y, w = table["x"], table["y"], table["w"]
    # games against an unbounded player carry no information in the limit: y is still 1500
    assert y.elo == pytest.approx(1500, abs=1e-6)
    # x's low: a sweep of 10 games against 1500 and 4 against y (1500) has probability 0.025,
    # so E(low - 1500) = 0.025 ** (1/14)
    assert (x.elo, x.high) == (math.inf, math.inf)
    assert x.low == pytest.approx(1500 + elo_from_score(0.025 ** (1 / 14)), abs=1e-6)
    # w's high: E(1500 - high) = 0.025 ** (1/6)
    assert (w.elo, w.low) == (-math.inf, -math.inf)
    assert w.high == pytest.approx(1500 - elo_from_score(0.025 ** (1 / 6)), abs=1e-6)
    assert list(table) == ["x", "sf", "y", "w"]


def test_a_player_unbounded_both_ways_is_nan() -> None:
    # a sweeps (rating -> +inf), d is swept (-> -inf); b only lost to a and beat d
    games = (
        games_between("a", "sf", 3, 0, 0)
        + games_between("d", "sf", 0, 0, 3)
        + games_between("b", "a", 0, 0, 2)
        + games_between("b", "d", 2, 0, 0)
    )
    table = rate_players(games, anchors={"sf": 1500})
    b = table["b"]
    assert math.isnan(b.elo) and (b.low, b.high) == (-math.inf, math.inf)
    assert (table["a"].elo, table["d"].elo) == (math.inf, -math.inf)
    assert list(table)[-1] == "b"


def test_prior_games_keep_a_perfect_score_finite() -> None:
    # 10 wins plus 1 virtual draw against the anchor mean 1500: 10.5 / 11 against 1500
    games = games_between("x", "sf", 10, 0, 0)
    x = rate_players(games, anchors={"sf": 1500}, prior_games=1.0)["x"]
    assert x.elo == pytest.approx(1500 + elo_from_score(10.5 / 11), abs=1e-6)
    assert x.low < x.elo < x.high < math.inf
    assert (x.games, x.score) == (10, 1.0)  # real games only


def test_rate_players_rejects_bad_input() -> None:
    games = games_between("p", "sf", 3, 1, 2)
    with pytest.raises(ValueError, match="at least one anchor"):
        rate_players(games, anchors={})
    with pytest.raises(ValueError, match="anchor\\(s\\) sf2000 play no game"):
        rate_players(games, anchors={"sf": 1500, "sf2000": 2000})
    with pytest.raises(ValueError, match="q, r not connected to any anchor"):
        rate_players(games + games_between("q", "r", 1, 0, 1), anchors={"sf": 1500})
    with pytest.raises(ValueError, match="0, 0.5 or 1"):
        rate_players([("p", "sf", 0.7)], anchors={"sf": 1500})
    with pytest.raises(ValueError, match="cannot play itself"):
        rate_players([("sf", "sf", 1.0)], anchors={"sf": 1500})
    with pytest.raises(ValueError, match="prior_games"):
        rate_players(games, anchors={"sf": 1500}, prior_games=-1)


# --- sprt ----------------------------------------------------------------------------------------

# elo0 = 0, elo1 = 50: s0 = 0.5, s1 = 1/(1 + 10^(-50/400)) = 1/(1 + 0.7498942) = 0.5714631,
# s1 - s0 = 0.0714631, s0 + s1 = 1.0714631.
S0, S1 = 0.5, 1 / (1 + 10 ** (-50 / 400))


@pytest.mark.parametrize(
    ("wins", "draws", "losses", "mean", "var", "decision"),
    [
        # W=60 D=20 L=20, N=100: mean (60 + 10)/100 = 0.7;
        # var (60·0.3² + 20·0.2² + 20·0.7²)/100 = (5.4 + 0.8 + 9.8)/100 = 0.16;
        # llr = 100·0.0714631·(1.4 - 1.0714631)/(2·0.16) = 2.34785/0.32 = 7.337 >= 2.944: H1
        (60, 20, 20, 0.7, 0.16, "H1"),
        # W=40 D=120 L=40, N=200: mean 0.5; var (40·0.25 + 0 + 40·0.25)/200 = 0.1;
        # llr = 200·0.0714631·(1 - 1.0714631)/(2·0.1) = -1.02139/0.2 = -5.107 <= -2.944: H0
        (40, 120, 40, 0.5, 0.1, "H0"),
        # W=12 D=10 L=8, N=30: mean (12 + 5)/30 = 0.566667;
        # var (12·0.433333² + 10·0.066667² + 8·0.566667²)/30 = (2.253333 + 0.044444 + 2.568889)/30
        #     = 0.162222;
        # llr = 30·0.0714631·(1.133333 - 1.0714631)/(2·0.162222) = 0.132645/0.324444 = 0.409: continue
        (12, 10, 8, 17 / 30, 4.866667 / 30, "continue"),
    ],
)
def test_sprt_by_hand(wins: int, draws: int, losses: int, mean: float, var: float, decision: str) -> None:
    n = wins + draws + losses
    # the per-game variance, recomputed from its definition
    exact_var = (wins * (1 - mean) ** 2 + draws * (0.5 - mean) ** 2 + losses * mean**2) / n
    assert exact_var == pytest.approx(var, abs=1e-6)
    llr = n * (S1 - S0) * (2 * mean - S0 - S1) / (2 * exact_var)
    result = sprt(wins, draws, losses, elo0=0, elo1=50)
    assert result.llr == pytest.approx(llr, abs=1e-6)
    assert result.decision == decision


def test_sprt_hand_llr_literals() -> None:
    assert sprt(60, 20, 20, elo0=0, elo1=50).llr == pytest.approx(7.337, abs=1e-3)
    assert sprt(40, 120, 40, elo0=0, elo1=50).llr == pytest.approx(-5.107, abs=1e-3)
    assert sprt(12, 10, 8, elo0=0, elo1=50).llr == pytest.approx(0.409, abs=1e-3)


def test_sprt_bounds() -> None:
    result = sprt(10, 10, 10, elo0=0, elo1=10)
    assert (result.lower, result.upper) == pytest.approx((-math.log(19), math.log(19)))
    assert result.upper == pytest.approx(2.944, abs=1e-3)
    loose = sprt(10, 10, 10, elo0=0, elo1=10, alpha=0.1, beta=0.2)
    assert (loose.lower, loose.upper) == pytest.approx((math.log(0.2 / 0.9), math.log(0.8 / 0.1)))


@pytest.mark.parametrize(("wins", "draws", "losses"), [(0, 0, 0), (50, 0, 0), (0, 300, 0), (0, 0, 7)])
def test_sprt_without_games_or_variance_continues(wins: int, draws: int, losses: int) -> None:
    result = sprt(wins, draws, losses, elo0=0, elo1=10)
    assert (result.llr, result.decision) == (0.0, "continue")


def test_sprt_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="elo0 must be below elo1"):
        sprt(1, 1, 1, elo0=5, elo1=5)
    with pytest.raises(ValueError, match="alpha and beta"):
        sprt(1, 1, 1, elo0=0, elo1=5, alpha=0.6, beta=0.5)


def test_rating_does_not_import_ray() -> None:
    code = "import sys, chessrl.arena.rating; assert 'ray' not in sys.modules and 'scipy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- game pairs: pentanomial counts, LLR, SPRT, Elo ------------------------------------------


def test_pair_counts_bins_each_pair_by_its_total() -> None:
    assert pair_counts([]) == (0, 0, 0, 0, 0)
    assert pair_counts([0, 0.5, 1, 1, 1.5, 2, 2, 2]) == (1, 1, 2, 1, 3)
    with pytest.raises(ValueError, match="0, 0.5, 1, 1.5 or 2"):
        pair_counts([0.75])


def _brute_force_llr(counts: tuple[int, ...], elo0: float, elo1: float) -> float:
    """The generalized LLR by a general-purpose constrained optimiser (SLSQP), not the secular
    equation: max log-likelihood over distributions with mean s1, minus the same with mean s0."""
    import numpy as np
    from scipy.optimize import minimize

    c = np.array([x if x > 0 else PENTANOMIAL_EPSILON for x in counts], float)
    a = np.arange(5) / 4

    def best(s: float) -> float:
        cons = [
            {"type": "eq", "fun": lambda q: q.sum() - 1},
            {"type": "eq", "fun": lambda q: (q * a).sum() - s},
        ]
        r = minimize(
            lambda q: -(c * np.log(q)).sum(),
            c / c.sum(),
            constraints=cons,
            bounds=[(1e-12, 1)] * 5,
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 1000},
        )
        return float((c * np.log(r.x)).sum())

    return best(expected_score(elo1)) - best(expected_score(elo0))


@pytest.mark.parametrize(
    "counts, elo0, elo1",
    [
        ((0, 1, 3, 2, 2), 0, 50),
        ((0, 0, 10, 0, 0), 0, 10),
        ((0, 1, 4, 10, 5), 0, 20),
        ((3, 10, 40, 12, 5), -5, 5),
        ((7, 1, 0, 0, 2), -20, 20),
    ],
)
def test_pentanomial_llr_is_the_constrained_maximum_likelihood_ratio(counts, elo0, elo1) -> None:
    assert pentanomial_llr(counts, elo0, elo1) == pytest.approx(
        _brute_force_llr(counts, elo0, elo1), abs=1e-6
    )


def test_pentanomial_llr_by_hand_near_h0() -> None:
    """Pairs (1, 2, 4, 2, 1): mean 1/2 (so H0's distribution at elo0 = 0 is the observed one) and
    per-pair variance (0.1·0.25 + 0.2·0.0625)·2 = 0.075. For a small step d = s1 - 1/2 the GSPRT
    LLR is fishtest's Brownian approximation N·d·(2·x̄ - s0 - s1) / (2·σ²) = -10·d² / 0.15."""
    d = expected_score(5) - 0.5
    assert d == pytest.approx(0.0071951, abs=1e-7)
    by_hand = -10 * d * d / 0.15  # -0.0034513
    assert pentanomial_llr((1, 2, 4, 2, 1), 0, 5) == pytest.approx(by_hand, rel=1e-3)
    # far from H0 the exact LLR and the approximation part: the doctest's literal values hold
    assert pentanomial_llr((0, 1, 3, 2, 2), 0, 50) == pytest.approx(1.0262, abs=1e-4)
    assert pentanomial_llr((0, 2, 8, 20, 10), 0, 50) == pytest.approx(5.343, abs=1e-3)


def test_sprt_pentanomial_decides_and_checks_its_arguments() -> None:
    assert sprt_pentanomial((0, 0, 0, 0, 0), 0, 20).decision == "continue"
    strong = sprt_pentanomial((0, 2, 8, 20, 10), 0, 50)
    assert strong.decision == "H1" and strong.upper == pytest.approx(math.log(0.95 / 0.05))
    weak = sprt_pentanomial((10, 20, 8, 2, 0), 0, 50)
    assert weak.decision == "H0" and weak.llr <= weak.lower == pytest.approx(math.log(0.05 / 0.95))
    # more even pairs push toward H0: the LLR falls as they add up
    assert pentanomial_llr((0, 0, 100, 0, 0), 0, 20) < pentanomial_llr((0, 0, 10, 0, 0), 0, 20) < 0
    with pytest.raises(ValueError, match="elo0 must be below elo1"):
        sprt_pentanomial((1, 1, 1, 1, 1), 20, 20)
    with pytest.raises(ValueError, match="alpha and beta"):
        sprt_pentanomial((1, 1, 1, 1, 1), 0, 20, alpha=0)
    with pytest.raises(ValueError, match="five numbers"):
        pentanomial_llr((1, 1, 1), 0, 20)


def test_pentanomial_elo_by_hand() -> None:
    """(1, 2, 4, 2, 1): per-game pair scores 0, 1/4, 1/2, 3/4, 1, mean 1/2, summed squared
    deviations 0.25 + 2·0.0625 + 0 + 2·0.0625 + 0.25 = 0.75. With 1.92 pseudo-pairs at 0 and at 1:
    13.84 pairs, mean 1/2, variance (0.75 + 3.84·0.25)/13.84 = 0.12357, se sqrt(0.12357/13.84)
    = 0.09449; the 95% score interval 0.5 ± 1.95996·0.09449 = [0.3148, 0.6852] is ±135.1 Elo."""
    est = pentanomial_elo((1, 2, 4, 2, 1))
    assert (est.score, est.elo, est.games) == (0.5, 0.0, 20)
    low, high = augmented({0: 1, 0.25: 2, 0.5: 4, 0.75: 2, 1: 1})
    assert (low, high) == pytest.approx((0.3148, 0.6852), abs=1e-4)
    assert est.high == pytest.approx(elo_from_score(high))
    assert est.high == pytest.approx(135.1, abs=0.05) and est.low == pytest.approx(-est.high)
    assert pentanomial_elo((0, 0, 0, 1, 3)).elo > 0
    with pytest.raises(ValueError, match="at least one pair"):
        pentanomial_elo((0, 0, 0, 0, 0))
    with pytest.raises(ValueError, match="five numbers"):
        pentanomial_elo((1, 2, 3))


def test_pentanomial_elo_is_score_bounds_of_the_pairs() -> None:
    for counts in ((1, 2, 4, 2, 1), (0, 0, 10, 0, 0), (0, 0, 0, 0, 4), (3, 0, 0, 0, 0), (0, 1, 0, 7, 2)):
        s, low, high = score_bounds([(i / 4, c) for i, c in enumerate(counts)])
        est = pentanomial_elo(counts)
        assert est.score == s
        assert (est.low, est.high) == tuple(
            -math.inf if x <= 0 else math.inf if x >= 1 else elo_from_score(x) for x in (low, high)
        )


@pytest.mark.parametrize("cell", [1, 2, 3])
def test_pentanomial_pairs_all_alike_give_a_non_zero_interval(cell: int) -> None:
    counts = tuple(10 if i == cell else 0 for i in range(5))  # ten pairs, every one scoring cell/2
    est = pentanomial_elo(counts)
    s = cell / 4
    assert est.score == s and est.elo == pytest.approx(elo_from_score(s))
    assert est.low < est.elo < est.high and est.high - est.low > 100
    even = pentanomial_elo((0, 0, 10, 0, 0))  # ten even pairs: symmetric around 0
    assert even.elo == 0.0 and even.low == pytest.approx(-even.high) and even.high > 50


def test_pentanomial_sweeps_use_the_exact_bound_per_pair() -> None:
    sweep = pentanomial_elo((0, 0, 0, 0, 6))  # six pairs won 2-0: p^6 = 0.025 at the low end
    assert (sweep.elo, sweep.high) == (math.inf, math.inf)
    assert sweep.low == pytest.approx(elo_from_score(0.025 ** (1 / 6)))
    assert pentanomial_elo((6, 0, 0, 0, 0)).high == pytest.approx(-sweep.low)


def test_pentanomial_elo_agrees_with_the_textbook_interval_on_many_pairs() -> None:
    counts = (30, 120, 400, 150, 50)
    pairs = sum(counts)
    pdf = [(i / 4, c / pairs) for i, c in enumerate(counts)]
    mean = sum(a * p for a, p in pdf)
    var = sum(p * (a - mean) ** 2 for a, p in pdf)
    est = pentanomial_elo(counts)
    s, low, high = score_bounds([(i / 4, c) for i, c in enumerate(counts)])
    assert s == pytest.approx(mean)
    assert high - low == pytest.approx(2 * Z95 * math.sqrt(var / pairs), rel=0.03)
    assert est.low < est.elo < est.high


def test_rate_players_ten_draws_against_an_anchor_have_width() -> None:
    games = games_between("p", "sf", 0, 10, 0)
    p = rate_players(games, anchors={"sf": 1500})["p"]
    assert p.elo == pytest.approx(1500, abs=1e-6)
    # Fisher information 10·(ln10/400)²·0.25: half-width 1.96·400/(ln10·sqrt(2.5)) = 215.3 Elo
    half = Z95 * 400 / (math.log(10) * math.sqrt(2.5))
    assert (p.low, p.high) == pytest.approx((1500 - half, 1500 + half))
    assert p.low < 1500 - 200 and p.high > 1500 + 200
