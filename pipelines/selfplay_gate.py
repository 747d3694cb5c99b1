"""The arena games of the ``selfplay`` phase: the learner's gate (the new network against the
best) and the final evaluation (the best network against a random mover and its generation-0
self, as Ray tasks). Not a phase: :mod:`pipelines.selfplay` and its learner use it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from typing import Any

from chessrl.search.mcts_config import MCTSConfig
from chessrl.search.net_config import NetConfig
from cluster.storage import Storage
from pipelines.common.phase import PhaseContext
from pipelines.config import SelfplayConfig


def arena_search(mcts: MCTSConfig | dict[str, Any]) -> MCTSConfig:
    """The self-play search (a config, or its fields as a saved dict has them) without root
    noise: how networks play in the arena.

    >>> arena_search({"simulations": 8, "dirichlet_eps": 0.25}).dirichlet_eps
    0.0
    """
    config = mcts if isinstance(mcts, MCTSConfig) else MCTSConfig(**mcts)
    return dataclasses.replace(config, dirichlet_eps=0.0)


def play_gate(
    candidate: Any, best: Any, iteration: int, *, games: int, mcts: MCTSConfig, max_plies: int, seed: int
) -> tuple[int, int, int]:
    """The gate of ``iteration``: ``candidate`` ("new") against ``best``, ``games`` games (at least
    two) from seeded random openings, each from both sides, searching as ``mcts`` without root
    noise; wins, draws and losses of the new network."""
    from chessrl.arena.batched_arena import SearchSide, match_record, play_batched_match
    from chessrl.arena.game import random_openings
    from chessrl.search.mcts import NetworkEvaluator

    openings = random_openings(max(1, games // 2), 2, seed=seed + iteration)
    search = arena_search(mcts)
    games = play_batched_match(
        SearchSide("new", NetworkEvaluator(candidate), search),
        SearchSide("best", NetworkEvaluator(best), search),
        openings,
        max_plies=max_plies,
        seed=seed + iteration,
    )
    return match_record(games, "new")


def evaluate_chunk(
    best_state: dict[str, Any],
    gen0_state: dict[str, Any],
    net: dict[str, Any],
    mcts: dict[str, Any],
    opponent: str,
    openings: list[Any],
    max_plies: int,
    seed: int,
) -> list[dict[str, Any]]:
    """A Ray task: the best network (MCTS, no noise) against ``random`` or ``gen0`` from ``openings``."""
    import torch

    from chessrl.arena.batched_arena import SearchSide, play_batched_match
    from chessrl.search.mcts import NetworkEvaluator
    from chessrl.search.network import PolicyValueNet

    torch.set_num_threads(1)
    config = NetConfig(**net)
    search = arena_search(mcts)

    def side(name: str, weights: dict[str, Any] | None) -> SearchSide:
        if weights is None:
            return SearchSide(name)
        model = PolicyValueNet(config)
        model.load_state_dict(weights)
        return SearchSide(name, NetworkEvaluator(model.eval()), search)

    new = side("selfplay", best_state)
    other = side("random", None) if opponent == "random" else side("gen0", gen0_state)
    games = play_batched_match(new, other, openings, max_plies=max_plies, seed=seed)
    return [g.to_dict() for g in games]


def start_evaluation(
    cfg: SelfplayConfig,
    seed: int,
    cpus: int,
    networks: tuple[dict[str, Any], dict[str, Any]],
    net: dict[str, Any],
    mcts: dict[str, Any],
) -> dict[str, list[Any]]:
    """The evaluation's Ray tasks, by opponent: ``eval_games`` games against each, in up to
    ``cpus`` chunks (``networks``: the saved best and generation-0 networks)."""
    import ray

    from chessrl.arena.game import random_openings

    chunks = max(1, min(cpus, cfg.eval_games // 2))
    task = ray.remote(num_cpus=1)(evaluate_chunk)
    pending = {}
    for opponent, opening_seed in (("random", seed + 101), ("gen0", seed + 202)):
        openings = random_openings(math.ceil(cfg.eval_games / 2), 2, seed=opening_seed)
        pending[opponent] = [
            task.remote(
                networks[0]["model"],
                networks[1]["model"],
                net,
                mcts,
                opponent,
                openings[i::chunks],
                cfg.eval_max_plies,
                opening_seed + i,
            )
            for i in range(chunks)
            if openings[i::chunks]
        ]
    return pending


def opponent_result(games: list[Any]) -> dict[str, Any]:
    """The best network's record against one opponent, with its Elo interval and how games ended."""
    from chessrl.arena.batched_arena import match_record
    from chessrl.arena.rating import match_elo

    wins, draws, losses = match_record(games, "selfplay")
    elo = match_elo(wins, draws, losses)
    return {
        "games": len(games),
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "score": (wins + 0.5 * draws) / max(1, len(games)),
        "elo": elo.elo,
        "elo_low": elo.low,
        "elo_high": elo.high,
        "terminations": dict(Counter(g.termination for g in games)),
    }


def final_evaluation(
    context: PhaseContext,
    phase: Storage,
    cpus: int,
    networks: tuple[dict[str, Any], dict[str, Any]],
    net: dict[str, Any],
    mcts: dict[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """The best network against a random mover and against its generation-0 self
    (``eval_games`` each, as Ray tasks; ``networks``: the saved best and generation-0 networks,
    ``net`` and ``mcts`` their config and search): the results by opponent and their summary
    lines; the games go to ``eval/games.pgn``, the results to ``eval/results.json`` and the
    tracking run. Nothing without ``eval_games``."""
    import ray

    from chessrl.arena.game import ArenaGame, game_pgn

    cfg, run = context.config.selfplay, context.config.run
    evaluation: dict[str, Any] = {}
    lines: list[str] = []
    if not cfg.eval_games:
        return evaluation, lines
    started = time.perf_counter()
    pending = start_evaluation(cfg, run.seed, cpus, networks, net, mcts)
    best = networks[0]
    pgn: list[str] = []
    for opponent, refs in pending.items():
        games = [ArenaGame.from_dict(d) for chunk in ray.get(refs) for d in chunk]
        evaluation[opponent] = e = opponent_result(games)
        pgn += [
            game_pgn(g, event=f"selfplay {run.name}: best v{best['version']} vs {opponent}") for g in games
        ]
        ended = Counter(e["terminations"]).most_common()
        lines.append(
            f"  vs {opponent:<9} +{e['wins']} ={e['draws']} -{e['losses']}  score {e['score']:.1%}, "
            f"Elo {_elo_text(e)} ({', '.join(f'{k} {v}' for k, v in ended)})"
        )
    evaluation["seconds"] = round(time.perf_counter() - started, 1)
    phase.write_text("eval/games.pgn", "\n\n".join(pgn) + "\n")
    phase.write_text("eval/results.json", json.dumps(json_safe(evaluation), indent=2, sort_keys=True))
    context.tracking.log_metrics(
        {
            f"eval_{opp}_{k}": v
            for opp, e in evaluation.items()
            if isinstance(e, dict)
            for k, v in e.items()
            if isinstance(v, (int, float)) and math.isfinite(v)
        }
    )
    return evaluation, lines


def json_safe(value: Any) -> Any:
    """``value`` with infinite floats as the strings "inf" / "-inf" (strict JSON has no Infinity).

    >>> json_safe({"elo_high": float("inf"), "x": [1.5, float("-inf")]})
    {'elo_high': 'inf', 'x': [1.5, '-inf']}
    """
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _elo_text(e: dict[str, Any]) -> str:
    low, high = e["elo_low"], e["elo_high"]  # as many decimals as keep the two ends apart
    digits = next(
        (d for d in range(12) if 2 * 10**-d <= high - low and f"{low:+.{d}f}" != f"{high:+.{d}f}"), 12
    )

    def fmt(x: float) -> str:
        return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:+.{digits}f}"

    return f"{fmt(e['elo'])} [{fmt(e['elo_low'])}, {fmt(e['elo_high'])}]"
