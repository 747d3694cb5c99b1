"""Gumbel root search on a :class:`~chessrl.search.mcts.BatchedMCTS` tree (``MCTSConfig(search="gumbel")``):
the roots' Gumbel scores and sequential halving schedules, the move each node selects (at a root
among the moves considered, below it the deterministic selection) and the move a root chooses at
the end, on the rows of a :class:`~chessrl.search.mcts_tree.ArrayTree`. The math is
:mod:`chessrl.search.gumbel`'s.
"""

from __future__ import annotations

import numpy as np

from chessrl.search import gumbel
from chessrl.search.mcts_config import MCTSConfig
from chessrl.search.mcts_tree import ArrayTree, padded_edges

__all__ = ["choose", "halving_schedules", "pick", "prepare_root"]

_TINY = float(np.finfo(np.float64).tiny)


def prepare_root(tree: ArrayTree, node: int, edges: slice, rng: np.random.Generator, add_noise: bool) -> None:
    """Make ``node`` (its moves at ``edges``) a Gumbel root: no Dirichlet noise, this search's
    visits counted from now, and its scores ``g + logits`` (``g`` Gumbel noise drawn from ``rng``
    with ``add_noise``, else 0)."""
    tree.noisy[node] = False
    tree.Psel[edges] = tree.P[edges]
    tree.N0[edges] = tree.N[edges]
    width = edges.stop - edges.start
    g = rng.gumbel(size=width) if add_noise else np.zeros(width)
    tree.score[edges] = g + np.log(np.maximum(tree.P[edges], _TINY))


def halving_schedules(
    tree: ArrayTree, ids: np.ndarray, config: MCTSConfig, sims: int
) -> dict[int, tuple[int, ...]]:
    """Per root in ``ids``: sequential halving's schedule over ``sims`` simulations, among the
    config's ``gumbel_actions`` moves (fewer when fewer are legal)."""
    return {
        i: gumbel.considered_visit_sequence(min(config.gumbel_actions, c), sims)
        for i, c in zip(ids.tolist(), tree.count[ids].tolist(), strict=True)
    }


def pick(
    tree: ArrayTree,
    nodes: np.ndarray,
    at_root: bool,
    schedules: dict[int, tuple[int, ...]],
    config: MCTSConfig,
) -> np.ndarray:
    """The edge each of ``nodes`` selects: at a root (``schedules`` its halving schedule) the
    considered move with the best ``g + logits + sigma(completed Q)``, below the roots the
    deterministic selection; a move known to mate always."""
    idx, valid = padded_edges(tree, nodes)
    args = (tree.value[nodes], tree.Q[idx], tree.N[idx], tree.P[idx], valid, config.c_visit, config.c_scale)
    if at_root:
        search_visits = tree.N[idx] - tree.N0[idx]
        done = np.where(valid, search_visits, 0).sum(axis=1)
        considered = np.array(
            [
                seq[min(d, len(seq) - 1)] if seq else 0
                for seq, d in zip([schedules[i] for i in nodes.tolist()], done.tolist(), strict=True)
            ],
            dtype=np.int64,
        )
        score = gumbel.root_scores(tree.score[idx], considered, search_visits, *args)
    else:
        score = gumbel.interior_scores(*args)
    best = score.argmax(axis=1)
    mate = tree.mate[nodes]
    return tree.first[nodes] + np.where(mate >= 0, mate, best)


def choose(tree: ArrayTree, node: int, edges: slice, config: MCTSConfig) -> None:
    """A Gumbel root after its search (its moves at ``edges``): the move it chose, kept in
    ``tree.chosen`` (a mate in one, else among the most visited of this search the best
    ``g + logits + sigma(completed Q)``)."""
    if tree.mate[node] >= 0:
        tree.chosen[node] = tree.mate[node]
        return
    visits = (tree.N[edges] - tree.N0[edges])[None]
    valid = np.ones_like(visits, dtype=bool)
    score = gumbel.root_scores(
        tree.score[edges][None],
        visits.max(axis=1),
        visits,
        tree.value[[node]],
        tree.Q[edges][None],
        tree.N[edges][None],
        tree.P[edges][None],
        valid,
        config.c_visit,
        config.c_scale,
    )
    tree.chosen[node] = int(score[0].argmax())
