"""Gumbel root search's math (Danihelka et al. 2022, "Policy improvement by planning with
Gumbel"), as DeepMind's ``mctx`` computes it, on padded ``(nodes, moves)`` arrays.

* The root samples ``m`` moves without replacement by Gumbel-top-k (the ``m`` largest
  ``g(a) + logits(a)``, ``g`` standard Gumbel noise) and shares the simulations among them by
  sequential halving: :func:`considered_visit_sequence` is the visit count a move must have to be
  simulated next; among those, the one with the largest ``g + logits + sigma(completed Q)``.
* Q of an unvisited move is *completed* by the mixed value approximation
  (:func:`mixed_value`); ``sigma`` (:func:`sigma`) rescales the completed Q to [0, 1] over the
  node's moves and multiplies by ``(c_visit + max_b N(b)) * c_scale``.
* The policy target is the improved policy ``softmax(logits + sigma(completed Q))``
  (:func:`improved_policy`); below the root the move is deterministic: the largest
  ``pi'(a) - N(a) / (1 + sum_b N(b))`` (:func:`interior_scores`).

>>> considered_visit_sequence(4, 12)   # 4 moves, 12 simulations: a round of 4, then the best 2
(0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4)
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = [
    "completed_q",
    "considered_visit_sequence",
    "improved_policy",
    "interior_scores",
    "mixed_value",
    "root_scores",
    "sigma",
]

_TINY = float(np.finfo(np.float64).tiny)


@functools.lru_cache(maxsize=256)
def considered_visit_sequence(max_considered: int, simulations: int) -> tuple[int, ...]:
    """Sequential halving's schedule (``mctx.get_sequence_of_considered_visits``): for each
    simulation, the visit count the considered moves must have to get it.

    >>> considered_visit_sequence(2, 5), considered_visit_sequence(1, 3)
    ((0, 0, 1, 1, 2), (0, 1, 2))
    """
    if max_considered <= 1:
        return tuple(range(simulations))
    log2max = math.ceil(math.log2(max_considered))
    sequence: list[int] = []
    visits = [0] * max_considered
    considered = max_considered
    while len(sequence) < simulations:
        extra = max(1, int(simulations / (log2max * considered)))
        for _ in range(extra):
            sequence.extend(visits[:considered])
            for i in range(considered):
                visits[i] += 1
        considered = max(2, considered // 2)
    return tuple(sequence[:simulations])


def mixed_value(
    raw_value: np.ndarray, q: np.ndarray, n: np.ndarray, prior: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """The mixed value approximation per node: ``(v + sum_b N(b) * sum_{visited a} pi(a) Q(a) /
    sum_{visited a} pi(a)) / (1 + sum_b N(b))`` (``v`` the network's value)."""
    n = np.where(valid, n, 0)
    total = n.sum(axis=1).astype(np.float64)
    p = np.maximum(prior, _TINY)
    visited = n > 0
    psum = np.where(visited, p, 0.0).sum(axis=1)
    weighted = np.where(visited, p * q / np.maximum(psum, _TINY)[:, None], 0.0).sum(axis=1)
    return (raw_value + total * weighted) / (total + 1.0)


def completed_q(
    raw_value: np.ndarray, q: np.ndarray, n: np.ndarray, prior: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """Q where visited, the node's :func:`mixed_value` where not."""
    return np.where(n > 0, q, mixed_value(raw_value, q, n, prior, valid)[:, None])


def sigma(
    cq: np.ndarray, n: np.ndarray, valid: np.ndarray, c_visit: float = 50.0, c_scale: float = 1.0
) -> np.ndarray:
    """``(c_visit + max_b N(b)) * c_scale * q01``: ``q01`` the completed Q rescaled to [0, 1]
    by its minimum and maximum over the node's moves."""
    lo = np.where(valid, cq, np.inf).min(axis=1, keepdims=True)
    hi = np.where(valid, cq, -np.inf).max(axis=1, keepdims=True)
    q01 = (cq - lo) / np.maximum(hi - lo, 1e-8)
    maxvisit = np.where(valid, n, 0).max(axis=1, keepdims=True)
    return (c_visit + maxvisit) * c_scale * q01


def _softmax(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    x = np.where(valid, x, -np.inf)
    x = np.exp(x - x.max(axis=1, keepdims=True))
    return x / x.sum(axis=1, keepdims=True)


def _logits(prior: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(prior, _TINY))


def _completed_sigma(
    raw_value: np.ndarray,
    q: np.ndarray,
    n: np.ndarray,
    prior: np.ndarray,
    valid: np.ndarray,
    c_visit: float,
    c_scale: float,
) -> np.ndarray:
    """:func:`sigma` of the :func:`completed_q`: what the improved policy and the root's scores
    add to the logits."""
    return sigma(completed_q(raw_value, q, n, prior, valid), n, valid, c_visit, c_scale)


def improved_policy(
    raw_value: np.ndarray,
    q: np.ndarray,
    n: np.ndarray,
    prior: np.ndarray,
    valid: np.ndarray,
    c_visit: float = 50.0,
    c_scale: float = 1.0,
) -> np.ndarray:
    """``softmax(logits + sigma(completed Q))`` over each node's moves (0 on padding)."""
    s = _completed_sigma(raw_value, q, n, prior, valid, c_visit, c_scale)
    return _softmax(_logits(prior) + s, valid)


def interior_scores(
    raw_value: np.ndarray,
    q: np.ndarray,
    n: np.ndarray,
    prior: np.ndarray,
    valid: np.ndarray,
    c_visit: float = 50.0,
    c_scale: float = 1.0,
) -> np.ndarray:
    """Below the root: ``pi'(a) - N(a) / (1 + sum_b N(b))`` (-inf on padding); its argmax is
    the deterministic selection of the paper."""
    pi = improved_policy(raw_value, q, n, prior, valid, c_visit, c_scale)
    total = np.where(valid, n, 0).sum(axis=1, keepdims=True)
    return np.where(valid, pi - n / (1.0 + total), -np.inf)


def root_scores(
    gumbel_logits: np.ndarray,
    considered: np.ndarray,
    search_visits: np.ndarray,
    raw_value: np.ndarray,
    q: np.ndarray,
    n: np.ndarray,
    prior: np.ndarray,
    valid: np.ndarray,
    c_visit: float = 50.0,
    c_scale: float = 1.0,
) -> np.ndarray:
    """At the root: ``max(-1e9, g + logits + sigma(completed Q))`` for the moves whose visits in
    this search (``search_visits``) equal the node's ``considered`` count, -inf for the others
    (``mctx``'s ``score_considered``). ``gumbel_logits`` is ``g + logits``."""
    s = _completed_sigma(raw_value, q, n, prior, valid, c_visit, c_scale)
    score = np.maximum(-1e9, gumbel_logits + s)
    return np.where(valid & (search_visits == considered[:, None]), score, -np.inf)
