"""Bench: moves/s scored through the RewardServer the way rollout collectors call it ÷ the same
model scoring one request per forward pass in a plain loop (same queries, same process count),
median of ``--runs`` runs of each; the ratio on the last line.

    .venv/bin/python bench/reward_server.py                     # 4 collectors, a 32-move step a call
    .venv/bin/python bench/reward_server.py --model runs/demo/reward/model --callers 4 --per-call 32
    .venv/bin/python bench/reward_server.py --per-call 1 --callers 64     # one move a call (the old shape)

Each caller sends ``--per-call`` moves in one ``score_many`` call (a collector's step: one move
of each of its live games), waits for the scores, then sends the next step, so ``callers x
per-call`` moves are outstanding; the server gathers them into batches of ``--max-batch``.
``--callers-as threads`` makes each caller a thread of the driver (``ray.get``); ``async`` (the
default) an asyncio task of the driver that awaits its ObjectRef.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import write_record  # noqa: E402


def collector_steps(callers: int, per_call: int, requests: int, seed: int = 0) -> list[list[list[Any]]]:
    """What ``callers`` rollout collectors ask, ``per_call`` live games each: step after step, the
    game so far and the policy's next move in each game (the opponent's reply between), a
    finished game replaced by a new one; ``requests`` queries in all, as steps per caller."""
    import chess

    from chessrl.rl.reward import RewardQuery

    rng = random.Random(seed)

    def new_game() -> list[str]:
        board, moves = chess.Board(), []
        while len(moves) < 120 and not board.is_game_over():
            moves.append(rng.choice(list(board.legal_moves)).uci())
            board.push(chess.Move.from_uci(moves[-1]))
        return moves

    games = [[(new_game(), 0) for _ in range(per_call)] for _ in range(callers)]
    out: list[list[list[Any]]] = [[] for _ in range(callers)]
    n = 0
    while n < requests:
        for c in range(callers):
            step = []
            for g, (moves, ply) in enumerate(games[c]):
                if ply >= len(moves):
                    moves, ply = new_game(), 0
                step.append(RewardQuery(tuple(moves[:ply]), moves[ply]))
                games[c][g] = (moves, ply + 2)
            step = step[: requests - n]
            if step:
                out[c].append(step)
                n += len(step)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="a saved reward model [default: an untrained tiny one]")
    parser.add_argument("--requests", type=int, default=2048, help="queries per run [default: 2048]")
    parser.add_argument("--callers", type=int, default=4, help="concurrent callers (collectors) [default: 4]")
    parser.add_argument("--per-call", type=int, default=32, help="moves in one call (a step) [default: 32]")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--callers-as", choices=["async", "threads"], default="async")
    parser.add_argument(
        "--prepare", choices=["caller", "server"], default="caller",
        help="where a step's moves are checked and tokenised: the caller, as rollout collectors do "
        "(score_ids_many), or the server (score_many) [default: caller]",
    )  # fmt: skip
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "reward_server.json"))
    args = parser.parse_args(argv)
    if min(args.requests, args.callers, args.per_call, args.runs, args.max_batch) < 1:
        parser.error("--requests, --callers, --per-call, --max-batch and --runs must be >= 1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)
    import ray
    import torch

    from actors.reward_server import RewardClient
    from chessrl.rl.reward import (
        PositionCache,
        build_reward_model,
        load_reward_model,
        prepare_queries,
        query_ids,
        reward_format,
        score_ids,
    )
    from cluster.config import RaySection
    from cluster.runtime import ray_session

    path = args.model
    if path is None:
        path = tempfile.mkdtemp(prefix="bench-rm-")
        model, tok = build_reward_model("tiny")
        model.save_pretrained(path)
        tok.save_pretrained(path)
    model, tok = load_reward_model(path)
    parts = collector_steps(args.callers, args.per_call, args.requests)
    queries = [q for steps in parts for step in steps for q in step]
    cpus = os.cpu_count() or 1
    torch.set_num_threads(cpus)
    where = "in the caller" if args.prepare == "caller" else "on the server"
    shape = (
        f"{args.callers} callers x {args.per_call} moves a call (checked and tokenised {where}), "
        f"max batch {args.max_batch}"
    )
    print(
        f"{args.requests} queries, {shape}, model {path}; machine: {cpus} CPU(s), {platform.processor() or platform.machine()}"
    )

    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from chessrl.lm.formats import get_format

    def call(actor: Any, c: int, step: list) -> Any:  # type: ignore[type-arg]
        """One collector's step: its moves prepared where asked, one call."""
        if args.prepare == "server":
            return actor.score_many.remote(step, False)
        rows = prepare_queries(reader[0], reader[1], caches[c], step)  # a collector's own cache
        return actor.score_ids_many.remote(rows, False)

    async def async_callers(actors: list, parts: list) -> int:  # type: ignore[type-arg]
        async def one(c: int, steps: list) -> int:  # type: ignore[type-arg]
            for step in steps:
                await call(actors[c % len(actors)], c, step)
            return sum(map(len, steps))

        return sum(await asyncio.gather(*(one(c, p) for c, p in enumerate(parts))))

    def thread_caller(actors: list, c: int, steps: list) -> int:  # type: ignore[type-arg]
        for step in steps:
            ray.get(call(actors[c % len(actors)], c, step))
        return sum(map(len, steps))

    plain, served = [], []
    with ray_session(RaySection(object_store_gb=1)):
        client = RewardClient.create(
            path, 1, run="bench", max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threads=cpus
        )
        try:
            tokenizer, fmt = ray.get(client.actors[0].reader.remote())
            reader = (tokenizer, get_format(fmt))
            pool = ThreadPoolExecutor(args.callers)
            caches = [PositionCache()]
            ray.get(call(client.actors[0], 0, queries[:64]))  # warm up
            for run in range(args.runs):
                started = time.perf_counter()
                for q in queries:
                    score_ids(model, [query_ids(tok, q, reward_format(model.config))], tok.pad_token_id)
                plain.append(len(queries) / (time.perf_counter() - started))
                caches = [PositionCache() for _ in parts]  # each run starts its games unseen
                before = ray.get(client.actors[0].stats.remote())
                started = time.perf_counter()
                if args.callers_as == "threads":
                    done = sum(pool.map(lambda cp: thread_caller(client.actors, *cp), enumerate(parts)))
                else:
                    done = asyncio.run(async_callers(client.actors, parts))
                assert done == len(queries)
                seconds = time.perf_counter() - started
                served.append(len(queries) / seconds)
                after = ray.get(client.actors[0].stats.remote())
                batches = after["batches"] - before["batches"]
                print(
                    f"run {run + 1}: server {served[-1]:.0f} moves/s ({len(queries) / batches:.1f} moves a forward pass, "
                    f"forward passes {100 * (after['forward_s'] - before['forward_s']) / seconds:.0f}% of the time, "
                    f"checking/tokenising on the server {after['prepare_s'] - before['prepare_s']:.2f} s), "
                    f"plain loop {plain[-1]:.0f} moves/s"
                )
        finally:
            client.shutdown()
    ratio = statistics.median(served) / statistics.median(plain)
    write_record(args.json, {"bench": "reward_server", "ratio": ratio, "server_moves_per_s": served,
                             "plain_moves_per_s": plain, "callers": args.callers, "per_call": args.per_call, "shape": shape, "requests": args.requests,
                             "max_batch": args.max_batch, "callers_as": args.callers_as, "prepare": args.prepare, "target": 5.0})  # fmt: skip
    print(
        f"reward_server ratio (server moves/s, {shape} / one request per forward pass, median of {args.runs}): {ratio:.2f} (target >= 5)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
