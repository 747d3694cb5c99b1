"""Elo arithmetic: expected scores, match intervals, ratings from many games, paired-match Elo.

Elo differences follow the logistic model: a player rated ``d`` points above its opponent is
expected to score ``1 / (1 + 10 ** (-d / 400))`` per game, a draw counting as half a win.

>>> round(expected_score(100), 4), round(elo_from_score(0.75), 2)
(0.6401, 190.85)

One match (wins, draws, losses from the first player's side) gives an Elo difference with an
interval on the score, mapped through :func:`elo_from_score`:

>>> est = match_elo(wins=30, draws=40, losses=10)
>>> round(est.score, 3), round(est.elo, 1), round(est.low, 1), round(est.high, 1)
(0.625, 88.7, 32.2, 140.9)

Every match-level interval (:func:`score_interval`, :func:`match_elo`, :func:`pentanomial_elo`,
the score plot of the evaluate report) is :func:`score_bounds`: an Agresti-Coull interval on the
observed outcomes with ``z²/2`` pseudo-outcomes at 0 and at 1 each, and the exact one-sided bound
for a clean sweep. The pseudo-outcomes keep the interval honest where the sample variance is
not: ten draws in ten games is not "0 Elo, exactly" but 0 within ±99 Elo, and one won game is
not proof of much.

>>> est = match_elo(wins=0, draws=10, losses=0)
>>> est.elo, round(est.low), round(est.high)
(0.0, -99, 99)

Many games between many players, some of them anchors with fixed ratings (Stockfish
``UCI_Elo`` levels), give every other player a maximum-likelihood rating:

>>> games = [("net", "sf1320", 1.0)] * 6 + [("sf1320", "net", 0.5)] * 4 + [("net", "sf1600", 0.0)] * 10
>>> table = rate_players(games, anchors={"sf1320": 1320, "sf1600": 1600})
>>> net = table["net"]
>>> round(net.elo), net.games, net.score, net.anchored
(1378, 20, 0.4, False)

The SPRT of an A/B match, on games or on game pairs, is :mod:`chessrl.arena.sprt`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "EloEstimate",
    "PlayerRating",
    "elo_from_score",
    "expected_score",
    "match_elo",
    "rate_players",
    "score_bounds",
    "score_interval",
    "pentanomial_elo",
]

_K = math.log(10) / 400  # slope of the logistic curve per Elo point, in natural-log units
_Term = tuple[str, "str | None", float, float]  # (player, opponent or None for the prior, games, score)


def expected_score(elo_diff: float) -> float:
    """The expected score per game of a player rated ``elo_diff`` above its opponent.

    >>> expected_score(0), round(expected_score(-400), 4)
    (0.5, 0.0909)
    """
    if elo_diff >= 0:
        return 1 / (1 + 10 ** (-elo_diff / 400))
    odds = 10 ** (elo_diff / 400)  # written this way so that large differences do not overflow
    return odds / (1 + odds)


def elo_from_score(score: float) -> float:
    """The Elo difference whose expected score is ``score``, which must lie strictly in (0, 1).

    >>> elo_from_score(0.5), round(elo_from_score(0.25), 2)
    (0.0, -190.85)
    """
    if not 0 < score < 1:
        raise ValueError(
            f"score must be strictly between 0 and 1, got {score}: "
            "a 0% or 100% score has no finite Elo difference"
        )
    return -400 * math.log10(1 / score - 1) + 0.0  # + 0.0 turns -0.0 into 0.0


def _elo_or_infinite(score: float) -> float:
    return -math.inf if score <= 0 else math.inf if score >= 1 else elo_from_score(score)


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def score_bounds(
    outcomes: Mapping[float, float] | Iterable[tuple[float, float]], confidence: float = 0.95
) -> tuple[float, float, float]:
    """THE interval of the project: the mean score of ``outcomes`` and its ``confidence`` interval.

    ``outcomes`` maps each observed score in [0, 1] to how many times it was observed (a mapping
    or ``(score, count)`` pairs): games (``{1: W, 0.5: D, 0: L}``) or game pairs scored per game
    (``{0: ..., 0.25: ..., 0.5: ..., 0.75: ..., 1: ...}``). Returns ``(score, low, high)`` with
    ``0 <= low <= score <= high <= 1``; ``low < high`` always.

    Method: an Agresti-Coull interval generalised from win/loss to any outcomes. ``z²/2``
    pseudo-outcomes at 0 and ``z²/2`` at 1 join the sample (``z`` the normal quantile); the
    augmented sample's mean ``m`` and per-outcome variance ``v`` give ``m ± z·sqrt(v / (N + z²))``,
    clipped to [0, 1] and widened, if need be, to contain the observed score. The
    pseudo-outcomes are the maximum-variance prior with the weight of about four games: the plain
    normal interval of the sample variance has zero width when every game ends alike (ten draws
    would be "0 Elo, exactly"), is far too narrow on a few games, and does not reach its nominal
    coverage near a 0% or 100% score; the augmented one has, for win/loss outcomes, the
    Agresti-Coull interval's near-nominal coverage at every ``N``, a width that never vanishes, and
    it tends to the plain normal (trinomial, pentanomial) interval as ``N`` grows (the
    pseudo-outcomes weigh ``z²/N``).

    One-sided samples (every outcome 1, or every outcome 0) take the exact Clopper-Pearson bound
    instead: with ``N`` straight wins the low end is the score ``p = tail^(1/N)``,
    ``tail = (1 - confidence)/2``, below which ``N`` straight wins have probability under
    ``tail`` (with draws possible a win is rarer than the mean score, so the bound holds for any
    outcomes in [0, 1]); the high end is 1 (an Elo of ``+inf``). It is honest at every ``N``,
    where the augmented normal one is not (one win: Agresti-Coull's low end 0.17 would miss a
    player scoring 0.1 one time in ten, not one in forty), and tighter from seven games up
    (ten wins: 0.69 against 0.68; a hundred: 0.964 against 0.956).

    Measured on win/loss matches of ``N`` games (exact binomial sums over true scores 0.001 ..
    0.999), the 95% interval covers the true score 98% of the time on average at ``N = 2``,
    96% at ``N = 10`` and 95.5% at ``N = 100``; its worst case over the true score is 0.82 at
    ``N = 2`` and 0.92 or more from ``N = 10`` (Wilson's interval dips to 0.82 at ``N = 2`` and
    still 0.84 at ``N = 10``; only the much wider Clopper-Pearson interval avoids such dips).

    >>> [round(x, 3) for x in score_bounds({0.5: 10})]            # ten draws
    [0.5, 0.361, 0.639]
    >>> [round(x, 3) for x in score_bounds({1: 10})]              # ten wins: the exact bound
    [1.0, 0.692, 1.0]
    """
    items = list(outcomes.items() if isinstance(outcomes, Mapping) else outcomes)
    for x, c in items:
        if not (0 <= x <= 1 and c >= 0):
            raise ValueError(f"outcomes are scores in [0, 1] with counts >= 0, got {x!r}: {c!r}")
    n = sum(c for _, c in items)
    if n <= 0:
        raise ValueError("score_bounds needs at least one game")
    z = _z(confidence)
    total = sum(x * c for x, c in items)
    score = total / n
    observed = {x for x, c in items if c > 0}
    tail = (1 - confidence) / 2
    if observed == {1}:
        return 1.0, tail ** (1 / n), 1.0
    if observed == {0}:
        return 0.0, 0.0, 1 - tail ** (1 / n)
    k = z * z / 2  # pseudo-outcomes at 0 and at 1 each
    m = n + 2 * k
    mean = (total + k) / m
    var = (sum(c * (x - mean) ** 2 for x, c in items) + k * (mean**2 + (1 - mean) ** 2)) / m
    half = z * math.sqrt(var / m)
    return score, max(0.0, min(score, mean - half)), min(1.0, max(score, mean + half))


def score_interval(
    wins: int, draws: int, losses: int, confidence: float = 0.95
) -> tuple[float, float, float]:
    """The score ``(W + D/2) / N`` of a match and its interval: :func:`score_bounds` of its games.

    >>> tuple(round(x, 4) for x in score_interval(10, 0, 10))
    (0.5, 0.2993, 0.7007)
    """
    if min(wins, draws, losses) < 0:
        raise ValueError(f"wins, draws and losses must be >= 0, got {wins}, {draws}, {losses}")
    if wins + draws + losses == 0:
        raise ValueError("score_interval needs at least one game")
    return score_bounds(((1.0, wins), (0.5, draws), (0.0, losses)), confidence)


@dataclass(frozen=True)
class EloEstimate:
    """An Elo difference from one match, with its interval (``±inf`` where the score bound is 0 or 1)."""

    elo: float
    low: float
    high: float
    score: float
    games: int
    wins: int
    draws: int
    losses: int


def match_elo(wins: int, draws: int, losses: int, confidence: float = 0.95) -> EloEstimate:
    """The Elo difference of a match, its interval being :func:`score_interval` mapped to Elo.

    A perfect (or nil) score has no finite Elo: ``elo`` is ``+inf`` (``-inf``) and the other side
    of the interval is the exact one-sided bound of :func:`score_bounds`, the score ``p`` at which
    ``N`` straight wins have probability ``(1 - confidence) / 2`` (``p = tail^(1/N)``), so the
    report can say "above X" instead of claiming nothing.

    >>> match_elo(10, 0, 10).elo, round(match_elo(5, 0, 0).low, 1), match_elo(5, 0, 0).high
    (0.0, -15.2, inf)
    >>> est = match_elo(0, 10, 0)                                  # ten draws: around 0, not at it
    >>> est.elo, round(est.low, 1), round(est.high, 1)
    (0.0, -99.0, 99.0)
    """
    s, low, high = score_interval(wins, draws, losses, confidence)
    elo, low, high = (_elo_or_infinite(x) for x in (s, low, high))
    return EloEstimate(elo, low, high, s, wins + draws + losses, wins, draws, losses)


@dataclass(frozen=True)
class PlayerRating:
    """A player's rating: ``elo`` in ``[low, high]``; ``games`` and ``score`` (0..1) count real games."""

    name: str
    elo: float
    low: float
    high: float
    games: int
    score: float
    anchored: bool


def _reached(start: set[str], edges: Mapping[str, set[str]]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for other in edges.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def _inverse(matrix: list[list[float]]) -> list[list[float]]:
    """Gauss-Jordan inverse with partial pivoting (the matrices here are positive definite)."""
    n = len(matrix)
    rows = [row[:] + [float(i == j) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [x / lead for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [row[n:] for row in rows]


def _sweep_bound(opponents: list[tuple[float, int]], tail: float) -> float:
    """The rating at which winning all ``n`` games against each opponent rating has probability ``tail``."""
    if not opponents:
        return -math.inf
    lo, hi = min(r for r, _ in opponents) - 8000, max(r for r, _ in opponents) + 8000
    for _ in range(100):  # the sweep's log-probability grows with the rating: bisect
        mid = (lo + hi) / 2
        log_p = sum(n * math.log(expected_score(mid - r)) for r, n in opponents)
        lo, hi = (lo, mid) if log_p > math.log(tail) else (mid, hi)
    return (lo + hi) / 2


def _tally(
    games: Sequence[tuple[str, str, float]], anchors: Mapping[str, float]
) -> tuple[dict[tuple[str, str], list[float]], dict[str, list[float]]]:
    """The games added up: per pair ``(a, b)``, ``a < b``, its games and ``a``'s total score; per
    player its games and total score. A bad game, or an anchor with no game, is a ValueError."""
    pairs: dict[tuple[str, str], list[float]] = {}  # (a, b), a < b -> [games, a's total score]
    played: dict[str, list[float]] = {}  # name -> [games, total score]
    for white, black, score in games:
        if score not in (0, 0.5, 1):
            raise ValueError(f"a game's score must be 0, 0.5 or 1, got {score!r} in {white} vs {black}")
        if white == black:
            raise ValueError(f"{white!r} cannot play itself")
        a, b, score_a = (white, black, score) if white < black else (black, white, 1 - score)
        stats = pairs.setdefault((a, b), [0, 0.0])
        stats[0] += 1
        stats[1] += score_a
        for name, s in ((white, score), (black, 1 - score)):
            played.setdefault(name, [0, 0.0])
            played[name][0] += 1
            played[name][1] += s
    missing = sorted(set(anchors) - set(played))
    if missing:
        raise ValueError(f"anchor(s) {', '.join(missing)} play no game in the games given")
    return pairs, played


def _links(
    pairs: Mapping[tuple[str, str], list[float]],
) -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """Who met whom, who took points from whom, and who conceded points to whom."""
    neighbours: dict[str, set[str]] = {}
    scored_against: dict[str, set[str]] = {}  # x -> the players x took points from
    conceded_to: dict[str, set[str]] = {}  # x -> the players who took points from x
    for (a, b), (n, score_a) in pairs.items():
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
        for x, y, took in ((a, b, score_a > 0), (b, a, score_a < n)):
            if took:
                scored_against.setdefault(x, set()).add(y)
                conceded_to.setdefault(y, set()).add(x)
    return neighbours, scored_against, conceded_to


def rate_players(
    games: Sequence[tuple[str, str, float]],
    anchors: Mapping[str, float],
    confidence: float = 0.95,
    prior_games: float = 0.0,
) -> dict[str, PlayerRating]:
    """Maximum-likelihood Elo of every player from ``(white, black, white's score)`` games.

    Logistic (Bradley-Terry) model without a white advantage, a draw counting as half a win;
    anchors keep their given ratings and the others are fitted by damped Newton steps. The
    interval is ``elo ± z·sqrt(diag(I⁻¹))`` with ``I`` the observed Fisher information of the
    free players. It treats each game as a win/loss trial, so with many draws it is wider
    than the trinomial interval of :func:`match_elo` (conservative).

    A player whose results only ever push its rating up (it scored 100% against everyone not
    itself unbounded above, e.g. won every game) has an infinite MLE: it gets ``elo = high = +inf``
    and ``low`` = the rating at which its clean sweep against finite-rated opponents has
    probability ``(1 - confidence) / 2`` (an exact one-sided bound with those opponents' ratings
    held fixed); mirrored for ``-inf``. A player unbounded both ways gets ``nan`` in
    ``[-inf, inf]``. ``prior_games > 0`` instead adds that many virtual draws per free player
    against the mean anchor rating, which keeps every rating finite (and shrinks it a little).

    Raises ValueError without anchors, for an anchor that plays no game, or for a player not
    connected to an anchor through games. The table is sorted from the strongest player down.
    """
    z = _z(confidence)
    if not anchors:
        raise ValueError("rate_players needs at least one anchor: a player with a fixed rating")
    if prior_games < 0:
        raise ValueError(f"prior_games must be >= 0, got {prior_games}")
    pairs, played = _tally(games, anchors)
    neighbours, scored_against, conceded_to = _links(pairs)
    lost = sorted(set(played) - _reached(set(anchors), neighbours))
    if lost:
        raise ValueError(f"player(s) {', '.join(lost)} not connected to any anchor through games")

    free = sorted(set(played) - set(anchors))
    if prior_games > 0:
        above = below = set(played)
    else:
        above = _reached(set(anchors), scored_against)  # ratings bounded above
        below = _reached(set(anchors), conceded_to)  # ratings bounded below
    finite = [name for name in free if name in above and name in below]
    ratings = {name: float(value) for name, value in anchors.items()}
    prior_mean = sum(ratings.values()) / len(ratings)
    # Games that move a finite free player; those against unbounded players add nothing in the limit.
    known = set(finite) | set(anchors)
    terms: list[_Term] = [
        (a, b, n, s)
        for (a, b), (n, s) in sorted(pairs.items())
        if a in known and b in known and not (a in anchors and b in anchors)
    ]
    terms += [(x, None, prior_games, prior_games / 2) for x in finite if prior_games > 0]  # None: the prior
    ratings.update(_fit(finite, ratings, prior_mean, terms))
    covariance = _inverse(_newton_terms(finite, ratings, prior_mean, terms)[2])

    tail = (1 - confidence) / 2
    table: list[PlayerRating] = []
    for name, (count, total) in played.items():
        elo, low, high = ratings.get(name, math.nan), -math.inf, math.inf
        opponents = [
            (ratings[o], int(pairs[min(name, o), max(name, o)][0]))
            for o in sorted(neighbours[name])
            if o in ratings
        ]
        if name in anchors:
            low = high = elo
        elif name in known:
            i = finite.index(name)
            half = z * math.sqrt(covariance[i][i])
            low, high = elo - half, elo + half
        elif name in below:  # unbounded above: it swept every finite-rated opponent it met
            elo, low = math.inf, _sweep_bound(opponents, tail)
        elif name in above:  # unbounded below: mirror image
            elo, high = -math.inf, -_sweep_bound([(-r, n) for r, n in opponents], tail)
        table.append(PlayerRating(name, elo, low, high, int(count), total / count, name in anchors))
    table.sort(key=lambda p: (math.isnan(p.elo), 0.0 if math.isnan(p.elo) else -p.elo, p.name))
    return {p.name: p for p in table}


def _log_expected(elo_diff: float) -> float:
    """``log(expected_score(elo_diff))`` without underflow: a Newton trial step can put two
    ratings thousands of Elo apart, where the expected score rounds to 0.0.

    >>> round(_log_expected(0), 6) == round(math.log(0.5), 6), _log_expected(-100_000) < -500
    (True, True)
    """
    x = _K * elo_diff
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def _newton_terms(
    free: Sequence[str], ratings: Mapping[str, float], prior_mean: float, terms: Sequence[_Term]
) -> tuple[float, list[float], list[list[float]]]:
    """Log-likelihood, its gradient over ``free`` and the observed Fisher information (minus the Hessian)."""
    index = {name: i for i, name in enumerate(free)}
    log_likelihood, grad, info = 0.0, [0.0] * len(free), [[0.0] * len(free) for _ in free]
    for a, b, n, s in terms:
        diff = ratings[a] - (prior_mean if b is None else ratings[b])
        p = expected_score(diff)
        log_likelihood += s * _log_expected(diff) + (n - s) * _log_expected(-diff)
        weight = _K * _K * n * p * (1 - p)
        for x, sign in ((a, 1), (b, -1)):
            if x in index:
                grad[index[x]] += sign * _K * (s - n * p)
                info[index[x]][index[x]] += weight
        if a in index and b in index:
            info[index[a]][index[b]] -= weight
            info[index[b]][index[a]] -= weight
    return log_likelihood, grad, info


def _fit(
    free: Sequence[str], start: Mapping[str, float], prior_mean: float, terms: Sequence[_Term]
) -> dict[str, float]:
    """Newton's method with backtracking from ``prior_mean`` (the log-likelihood is strictly concave)."""
    ratings = {**start, **{name: prior_mean for name in free}}
    for _ in range(200):
        before, grad, info = _newton_terms(free, ratings, prior_mean, terms)
        step = [sum(c * g for c, g in zip(row, grad, strict=True)) for row in _inverse(info)]
        if not step or max(abs(x) for x in step) < 1e-9:
            break
        t = 1.0
        while True:  # halve the step while it would lower the likelihood
            trial = {**ratings, **{x: ratings[x] + t * d for x, d in zip(free, step, strict=True)}}
            if t < 1e-6 or _newton_terms(free, trial, prior_mean, terms)[0] >= before - 1e-12 * abs(before):
                break
            t /= 2
        ratings = trial
    return ratings


def pentanomial_elo(counts: Sequence[int], confidence: float = 0.95) -> EloEstimate:
    """The Elo difference of a paired match and its interval, from the pairs' own variance: each
    pair is one outcome, its per-game score (0, 1/4, 1/2, 3/4 or 1), and :func:`score_bounds` of
    those pairs (fishtest's ``stat_util`` for many pairs, with ``sqrt(σ²_pair / N)`` the standard
    error), mapped through :func:`elo_from_score`. ``wins``/``draws``/``losses`` are left 0: a
    pair's games are not counted one by one here.

    >>> est = pentanomial_elo((1, 2, 4, 2, 1))
    >>> round(est.elo, 1), round(est.low, 1), round(est.high, 1), est.games
    (0.0, -135.1, 135.1, 20)
    """
    if len(counts) != 5 or min(counts) < 0:
        raise ValueError(f"pentanomial counts are five numbers >= 0, got {tuple(counts)}")
    pairs = sum(counts)
    if pairs == 0:
        raise ValueError("pentanomial_elo needs at least one pair")
    s, low, high = score_bounds([(i / 4, c) for i, c in enumerate(counts)], confidence)
    elo, low_elo, high_elo = (_elo_or_infinite(x) for x in (s, low, high))
    return EloEstimate(elo, low_elo, high_elo, s, 2 * pairs, 0, 0, 0)
