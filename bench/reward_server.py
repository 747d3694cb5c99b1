"""Bench: moves/s scored through the RewardServer under 64 concurrent callers ÷ the same model
scoring one request per forward pass in a plain loop (same queries, same process count), median
of ``--runs`` runs of each; the ratio on the last line.

    .venv/bin/python bench/reward_server.py                     # the tiny preset's shape, untrained
    .venv/bin/python bench/reward_server.py --model runs/demo/reward/model --callers 64 --runs 3

Each caller sends one request, waits for its score, then sends the next, so 64 requests are
outstanding at any time; the server gathers them into batches. ``--callers-as threads`` makes each
caller a thread of the driver (``ray.get``); ``async`` (the default) an asyncio task of the driver
that awaits its ObjectRef, which spares the driver 64 threads contending for its GIL.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import write_record  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="a saved reward model [default: an untrained tiny one]")
    parser.add_argument("--requests", type=int, default=2048, help="queries per run [default: 2048]")
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--callers-as", choices=["async", "threads"], default="async")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "reward_server.json"))
    args = parser.parse_args(argv)
    if min(args.requests, args.callers, args.runs, args.max_batch) < 1:
        parser.error("--requests, --callers, --max-batch and --runs must be >= 1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)
    import torch

    from actors.reward_server import RewardClient
    from chessrl.reward import (
        build_reward_model,
        example_queries,
        load_reward_model,
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
    queries = example_queries(args.requests)
    cpus = os.cpu_count() or 1
    torch.set_num_threads(cpus)
    print(
        f"{args.requests} queries, {args.callers} callers, model {path}; machine: {cpus} CPU(s), {platform.processor() or platform.machine()}"
    )

    from concurrent.futures import ThreadPoolExecutor

    def caller(client: RewardClient, part: list) -> int:  # type: ignore[type-arg]
        for q in part:
            client.score([q], normalized=False)
        return len(part)

    import asyncio

    async def async_callers(client: RewardClient, parts: list) -> int:  # type: ignore[type-arg]
        async def one(part: list) -> int:  # type: ignore[type-arg]
            for q in part:
                await client.submit([q], normalized=False)[0]
            return len(part)

        return sum(await asyncio.gather(*(one(p) for p in parts)))

    plain, served = [], []
    with ray_session(RaySection(object_store_gb=1)):
        client = RewardClient.create(
            path, 1, run="bench", max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threads=cpus
        )
        try:
            pool = ThreadPoolExecutor(args.callers)
            caller(client, queries[:64])  # warm up
            for run in range(args.runs):
                started = time.perf_counter()
                for q in queries:
                    score_ids(model, [query_ids(tok, q, reward_format(model.config))], tok.pad_token_id)
                plain.append(len(queries) / (time.perf_counter() - started))
                parts = [queries[i :: args.callers] for i in range(args.callers)]
                started = time.perf_counter()
                if args.callers_as == "threads":
                    assert sum(pool.map(lambda part: caller(client, part), parts)) == len(queries)
                else:
                    assert asyncio.run(async_callers(client, parts)) == len(queries)
                served.append(len(queries) / (time.perf_counter() - started))
                print(f"run {run + 1}: server {served[-1]:.0f} moves/s, plain loop {plain[-1]:.0f} moves/s")
        finally:
            client.shutdown()
    ratio = statistics.median(served) / statistics.median(plain)
    write_record(args.json, {"bench": "reward_server", "ratio": ratio, "server_moves_per_s": served,
                             "plain_moves_per_s": plain, "callers": args.callers, "requests": args.requests,
                             "max_batch": args.max_batch, "callers_as": args.callers_as, "target": 5.0})  # fmt: skip
    print(
        f"reward_server ratio (server moves/s under {args.callers} callers / one request per forward pass, median of {args.runs}): {ratio:.2f} (target >= 5)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
