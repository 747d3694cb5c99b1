"""The sequential probability ratio test (SPRT) of an A/B match, on games or on game pairs.

An A/B test stops when the sequential probability ratio test decides between ``elo0`` (H0)
and ``elo1`` (H1):

>>> result = sprt(wins=60, draws=20, losses=20, elo0=0, elo1=50)
>>> round(result.llr, 3), round(result.upper, 3), result.decision
(7.337, 2.944, 'H1')

Game pairs (the same opening, colours swapped) are counted by their total for the first player,
0, 0.5, 1, 1.5 or 2 points: the pentanomial counts fishtest tests on. Pairing cancels most of the
opening's bias, so its variance is smaller and the test needs fewer games than the trinomial:

>>> counts = pair_counts([2, 1.5, 1, 1, 1.5, 0.5, 2, 1])
>>> counts
(0, 1, 3, 2, 2)
>>> round(pentanomial_llr(counts, elo0=0, elo1=50), 3), sprt_pentanomial(counts, 0, 50).decision
(1.026, 'continue')

The Elo arithmetic they rest on (expected scores, intervals, ratings) is :mod:`chessrl.arena.rating`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from chessrl.arena.rating import expected_score

__all__ = [
    "PENTANOMIAL_EPSILON",
    "Pentanomial",
    "SprtResult",
    "pair_counts",
    "pentanomial_llr",
    "sprt",
    "sprt_pentanomial",
]


def _moments(wins: int, draws: int, losses: int) -> tuple[int, float, float]:
    """Games, mean score and per-game variance of the trinomial outcome (0, 0 when no games)."""
    if min(wins, draws, losses) < 0:
        raise ValueError(f"wins, draws and losses must be >= 0, got {wins}, {draws}, {losses}")
    n = wins + draws + losses
    if n == 0:
        return 0, 0.0, 0.0
    s = (wins + draws / 2) / n
    var = (wins * (1 - s) ** 2 + draws * (0.5 - s) ** 2 + losses * s**2) / n
    return n, s, var


@dataclass(frozen=True)
class SprtResult:
    """An SPRT state: the log-likelihood ratio, its stopping bounds, and ``"H0"``, ``"H1"`` or ``"continue"``."""

    llr: float
    lower: float
    upper: float
    decision: Literal["H0", "H1", "continue"]


def sprt(
    wins: int, draws: int, losses: int, elo0: float, elo1: float, alpha: float = 0.05, beta: float = 0.05
) -> SprtResult:
    """The SPRT of H0 "the Elo difference is ``elo0``" against H1 "it is ``elo1``".

    The generalized SPRT of fishtest and cutechess for logistic Elo and trinomial outcomes:
    ``llr = N·(s1 - s0)·(2·x̄ - s0 - s1) / (2·σ²)``, with ``x̄`` the mean score, ``σ²`` its
    per-game variance and ``s0``, ``s1`` the expected scores at ``elo0`` and ``elo1``. It stops
    at ``llr >= ln((1-β)/α)`` ("H1") or ``llr <= ln(β/(1-α))`` ("H0"). With no games, or a
    zero sample variance (all wins, all draws or all losses), ``llr`` is 0: "continue".

    >>> sprt(0, 0, 0, elo0=0, elo1=10).decision
    'continue'
    """
    if not elo0 < elo1:
        raise ValueError(f"elo0 must be below elo1, got elo0={elo0}, elo1={elo1}")
    if not (0 < alpha < 1 and 0 < beta < 1 and alpha + beta < 1):
        raise ValueError(f"alpha and beta must be in (0, 1) with alpha + beta < 1, got {alpha}, {beta}")
    lower, upper = math.log(beta / (1 - alpha)), math.log((1 - beta) / alpha)
    n, mean, var = _moments(wins, draws, losses)
    llr = 0.0
    if n > 0 and var > 0:
        s0, s1 = expected_score(elo0), expected_score(elo1)
        llr = n * (s1 - s0) * (2 * mean - s0 - s1) / (2 * var)
    decision: Literal["H0", "H1", "continue"] = "H1" if llr >= upper else "H0" if llr <= lower else "continue"
    return SprtResult(llr=llr, lower=lower, upper=upper, decision=decision)


# ---------------------------------------------------------------------------------------------
# game pairs: pentanomial statistics (fishtest's LLRcalc, in logistic Elo)

#: fishtest's regularisation: an empty pentanomial cell counts as this many pairs.
PENTANOMIAL_EPSILON = 1e-3
Pentanomial = tuple[int, int, int, int, int]


def pair_counts(pair_scores: Sequence[float]) -> Pentanomial:
    """How many game pairs scored 0, 0.5, 1, 1.5 and 2 points for the first player.

    >>> pair_counts([0, 2, 1, 1, 0.5])
    (1, 1, 2, 0, 1)
    """
    counts = [0] * 5
    for score in pair_scores:
        index = score * 2
        if index not in (0, 1, 2, 3, 4):
            raise ValueError(f"a pair's score must be 0, 0.5, 1, 1.5 or 2, got {score!r}")
        counts[int(index)] += 1
    return counts[0], counts[1], counts[2], counts[3], counts[4]


def _pdf(counts: Sequence[float]) -> tuple[float, list[tuple[float, float]]]:
    """fishtest's ``results_to_pdf``: empty cells get :data:`PENTANOMIAL_EPSILON`; per-game scores
    0, 1/4, 1/2, 3/4, 1 with their frequencies."""
    if len(counts) != 5 or min(counts) < 0:
        raise ValueError(f"pentanomial counts are five numbers >= 0, got {tuple(counts)}")
    regular = [c if c > 0 else PENTANOMIAL_EPSILON for c in counts]
    n = sum(regular)
    return n, [(i / 4, c / n) for i, c in enumerate(regular)]


def _secular(pdf: Sequence[tuple[float, float]]) -> float:
    """The root ``x`` of ``sum_i p_i·a_i / (1 + x·a_i) = 0`` between ``-1/max(a)`` and ``-1/min(a)``
    (``a`` takes both signs); the function falls strictly on that interval, so bisection finds it."""
    values = [a for a, _ in pdf]
    low, high = -1 / max(values), -1 / min(values)
    for _ in range(200):
        mid = (low + high) / 2
        if sum(p * a / (1 + mid * a) for a, p in pdf) > 0:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _mle_with_mean(pdf: Sequence[tuple[float, float]], s: float) -> list[tuple[float, float]]:
    """The distribution on the same outcomes, closest in likelihood to ``pdf``, whose mean is ``s``
    (fishtest's ``MLE_expected``: ``p_i / (1 + x·(a_i - s))`` with ``x`` from the secular equation)."""
    x = _secular([(a - s, p) for a, p in pdf])
    return [(a, p / (1 + x * (a - s))) for a, p in pdf]


def pentanomial_llr(counts: Sequence[float], elo0: float, elo1: float) -> float:
    """The generalized log-likelihood ratio of H1 (Elo difference ``elo1``) against H0 (``elo0``)
    for pentanomial ``counts``: fishtest's ``LLR_logistic``. Each hypothesis' distribution is the
    maximum-likelihood one with the expected score ``s0`` (``s1``); the LLR is
    ``N · sum_i p_i · (log p1_i - log p0_i)`` over the (regularised) observed frequencies ``p``.

    >>> round(pentanomial_llr((0, 0, 10, 0, 0), elo0=0, elo1=10), 2)   # ten even pairs: H0's way
    -0.29
    """
    if not elo0 < elo1:
        raise ValueError(f"elo0 must be below elo1, got elo0={elo0}, elo1={elo1}")
    n, pdf = _pdf(counts)
    s0, s1 = expected_score(elo0), expected_score(elo1)
    pdf0, pdf1 = _mle_with_mean(pdf, s0), _mle_with_mean(pdf, s1)
    return n * sum(
        p * (math.log(q1) - math.log(q0)) for (_, p), (_, q0), (_, q1) in zip(pdf, pdf0, pdf1, strict=True)
    )


def sprt_pentanomial(
    counts: Sequence[float], elo0: float, elo1: float, alpha: float = 0.05, beta: float = 0.05
) -> SprtResult:
    """The SPRT on game pairs, as fishtest runs it: :func:`pentanomial_llr` against the bounds
    ``ln(β/(1-α))`` (accept H0) and ``ln((1-β)/α)`` (accept H1). No pairs: ``llr`` 0, "continue".

    >>> result = sprt_pentanomial((0, 2, 8, 20, 10), elo0=0, elo1=50)
    >>> round(result.llr, 2), result.decision
    (5.34, 'H1')
    """
    if not (0 < alpha < 1 and 0 < beta < 1 and alpha + beta < 1):
        raise ValueError(f"alpha and beta must be in (0, 1) with alpha + beta < 1, got {alpha}, {beta}")
    lower, upper = math.log(beta / (1 - alpha)), math.log((1 - beta) / alpha)
    llr = pentanomial_llr(counts, elo0, elo1) if sum(counts) > 0 else 0.0
    if not elo0 < elo1:  # pentanomial_llr checked it when there were pairs
        raise ValueError(f"elo0 must be below elo1, got elo0={elo0}, elo1={elo1}")
    decision: Literal["H0", "H1", "continue"] = "H1" if llr >= upper else "H0" if llr <= lower else "continue"
    return SprtResult(llr=llr, lower=lower, upper=upper, decision=decision)
