"""arena_parallel bench: games/s of the arena (``pipelines.evaluate_matches.Arena``) when each game
task asks for what :func:`~pipelines.evaluate_matches.game_cpus` gives it, ÷ the same games when
each asks for a whole CPU (the arena before 2026-12-07).

    python bench/arena_parallel.py                  # 12 games a run, 3 runs of each, 2 CPUs
    python bench/arena_parallel.py --games 20 --repeats 5 --json /tmp/arena_parallel.json

The match is an SPRT's or a comparison's on a small machine: two tiny masked language models
(untrained GPT-2s of the tiny preset, built from config) from random openings, the games that reach
``--max-plies`` decided by Stockfish (an engine pool of one Stockfish at half a CPU, as
``evaluate`` starts it). With a whole CPU a game, 2 CPUs hold one game beside the pool, however
many ``max_parallel`` allows; sized, they hold ``limit`` (the cluster's CPUs). Runs alternate
(whole, sized; sized, whole; ...) in one embedded Ray, after a warm-up that loads the models in
the worker processes. The last line is ``arena_parallel: sized ÷ whole CPU = R`` (median).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from machine_load import fmt_load, timed
from record import RESULTS, write_record


def save_players(folder: Path) -> list[str]:
    """Two untrained tiny GPT-2s (different seeds) saved as ``save_pretrained`` does: their specs."""
    import torch

    from chessrl.lm.models import build_model

    specs = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model, tokenizer = build_model("tiny")
        path = folder / f"lm-{seed}"
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        specs.append(f"lm:{path},masked")
    return specs


def play(arena: Any, tasks: list[Any], folder: Path) -> dict[str, Any]:
    from cluster.storage import Storage

    started = time.perf_counter()
    games = arena.play(tasks, Storage.from_uri(str(folder)), "bench")
    seconds = time.perf_counter() - started
    return {"games": len(games), "seconds": seconds, "games_per_s": len(games) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=12, help="games a run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode")
    parser.add_argument("--max-plies", type=int, default=120)
    parser.add_argument("--cpus", type=int, default=2, help="the embedded Ray's CPUs")
    parser.add_argument("--json", default=str(RESULTS / "arena_parallel.json"))
    args = parser.parse_args()

    import ray

    from actors.engine_pool import EnginePool
    from chessrl.arena.game import random_openings
    from chessrl.arena.players import parse_player_spec
    from pipelines.evaluate_matches import POOL_CPUS_PER_ENGINE, Arena, Settings, game_cpus, schedule_pairs

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    tmp = Path(tempfile.mkdtemp(prefix="arena-parallel-"))
    a, b = (parse_player_spec(s) for s in save_players(tmp))
    settings = Settings(None, None, 1.0, 1, "fallback", 1000, args.max_plies, None, 6, adjudicate_cp=300)
    pool = EnginePool.spread(1, run="bench-arena", num_cpus_per_engine=POOL_CPUS_PER_ENGINE)
    limit = args.cpus
    modes = {"whole": 1.0, "sized": game_cpus(limit, args.cpus, reserved=POOL_CPUS_PER_ENGINE * pool.engines)}
    openings = random_openings(args.games, 8, seed=0)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    try:
        warm = Arena(settings, pool.actors, pool.engine_counts, limit, lambda _: None, modes["sized"])
        play(warm, schedule_pairs([(a, b)], 2 * limit, openings, seed=99), tmp / "warm-up")
        for r in range(args.repeats):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                arena = Arena(settings, pool.actors, pool.engine_counts, limit, lambda _: None, modes[mode])
                tasks = schedule_pairs([(a, b)], args.games, openings, seed=r)
                result = timed(play, arena, tasks, tmp / f"{mode}-{r}")
                runs[mode].append(result)
                print(
                    f"run {r} {mode} ({modes[mode]} CPU a game): {result['games']} games in "
                    f"{result['seconds']:.1f} s, {result['games_per_s']:.3f} games/s; "
                    f"other load {fmt_load(result['other_load_cores'])}",
                    flush=True,
                )
    finally:
        pool.shutdown()
        ray.shutdown()
    ratios = [s["games_per_s"] / w["games_per_s"] for s, w in zip(runs["sized"], runs["whole"], strict=True)]
    ratio = statistics.median(ratios)
    write_record(
        args.json,
        {
            "games": args.games,
            "max_plies": args.max_plies,
            "cpus": args.cpus,
            "cpus_per_game": modes,
            "runs": runs,
            "ratios": ratios,
            "ratio": ratio,
        },
    )
    print(f"arena_parallel: sized ÷ whole CPU = {ratio:.2f} (median of {len(ratios)}: {ratios})")


if __name__ == "__main__":
    main()
