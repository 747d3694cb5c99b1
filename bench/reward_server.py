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
import contextlib
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from record import RESULTS, write_record


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


class Callers:
    """The rollout collectors of a run, each sending its steps to a RewardServer actor in turn,
    a step's moves checked and tokenised where ``prepare`` says: ``caller`` (with a
    :class:`~chessrl.rl.reward.PositionCache` per caller, as a collector keeps one) or ``server``."""

    def __init__(self, prepare: str, reader: tuple[Any, Any]) -> None:
        from chessrl.rl.reward import PositionCache, prepare_queries

        self.prepare = prepare
        self.reader = reader
        self.caches = [PositionCache()]
        self.prepare_queries = prepare_queries

    def new_games(self, callers: int) -> None:
        """Each caller's cache empty: each run starts its games unseen."""
        from chessrl.rl.reward import PositionCache

        self.caches = [PositionCache() for _ in range(callers)]

    def call(self, actor: Any, c: int, step: list) -> Any:  # type: ignore[type-arg]
        """One collector's step: its moves prepared where asked, one call."""
        if self.prepare == "server":
            return actor.score_many.remote(step, False)
        # a collector's own cache
        rows = self.prepare_queries(self.reader[0], self.reader[1], self.caches[c], step)
        return actor.score_ids_many.remote(rows, False)

    async def async_callers(self, actors: list, parts: list) -> int:  # type: ignore[type-arg]
        """Every caller an asyncio task awaiting its calls' ObjectRefs; the moves scored."""
        import asyncio

        async def one(c: int, steps: list) -> int:  # type: ignore[type-arg]
            for step in steps:
                await self.call(actors[c % len(actors)], c, step)
            return sum(map(len, steps))

        return sum(await asyncio.gather(*(one(c, p) for c, p in enumerate(parts))))

    def thread_caller(self, actors: list, c: int, steps: list) -> int:  # type: ignore[type-arg]
        """Caller ``c``'s steps from a thread, one ``ray.get`` a call; the moves scored."""
        import ray

        for step in steps:
            ray.get(self.call(actors[c % len(actors)], c, step))
        return sum(map(len, steps))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's flags, checked."""
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
        "--prepare",
        choices=["caller", "server"],
        default="caller",
        help="where a step's moves are checked and tokenised: the caller, as rollout collectors do "
        "(score_ids_many), or the server (score_many) [default: caller]",
    )
    parser.add_argument("--json", default=str(RESULTS / "reward_server.json"))
    args = parser.parse_args(argv)
    if min(args.requests, args.callers, args.per_call, args.runs, args.max_batch) < 1:
        parser.error("--requests, --callers, --per-call, --max-batch and --runs must be >= 1")
    return args


def runs(
    args: argparse.Namespace, path: str, model: Any, tok: Any, parts: list[list[list[Any]]], cpus: int
) -> tuple[list[float], list[float]]:
    """``--runs`` runs of the plain loop and of the callers through one RewardServer in turn:
    the moves/s of each; each run's line printed as it ends."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import ray

    from actors.reward_server import RewardClient
    from chessrl.lm.formats import get_format
    from chessrl.rl.reward import query_ids, reward_format, score_ids
    from cluster.config import RaySection
    from cluster.runtime import ray_session

    queries = [q for steps in parts for step in steps for q in step]
    plain, served = [], []
    with ray_session(RaySection(object_store_gb=1)):
        client = RewardClient.create(
            path, 1, run="bench", max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threads=cpus
        )
        try:
            tokenizer, fmt = ray.get(client.actors[0].reader.remote())
            callers = Callers(args.prepare, (tokenizer, get_format(fmt)))
            pool = ThreadPoolExecutor(args.callers)
            ray.get(callers.call(client.actors[0], 0, queries[:64]))  # warm up
            for run in range(args.runs):
                started = time.perf_counter()
                for q in queries:
                    score_ids(model, [query_ids(tok, q, reward_format(model.config))], tok.pad_token_id)
                plain.append(len(queries) / (time.perf_counter() - started))
                callers.new_games(len(parts))
                before = ray.get(client.actors[0].stats.remote())
                started = time.perf_counter()
                if args.callers_as == "threads":
                    done = sum(
                        pool.map(lambda cp: callers.thread_caller(client.actors, *cp), enumerate(parts))
                    )
                else:
                    done = asyncio.run(callers.async_callers(client.actors, parts))
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
    return plain, served


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)
    from chessrl.rl.reward import build_reward_model

    with contextlib.ExitStack() as stack:
        path = args.model
        if path is None:  # a tiny model of its own, removed when the bench ends
            path = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-rm-"))
            model, tok = build_reward_model("tiny")
            model.save_pretrained(path)
            tok.save_pretrained(path)
        return measure(args, path)


def measure(args: argparse.Namespace, path: str) -> int:
    """Runs the bench on the reward model at `path` and prints (and records) its ratio."""
    import torch

    from chessrl.rl.reward import load_reward_model

    model, tok = load_reward_model(path)
    parts = collector_steps(args.callers, args.per_call, args.requests)
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
    plain, served = runs(args, path, model, tok, parts, cpus)
    ratio = statistics.median(served) / statistics.median(plain)
    write_record(
        args.json,
        {
            "bench": "reward_server",
            "ratio": ratio,
            "server_moves_per_s": served,
            "plain_moves_per_s": plain,
            "callers": args.callers,
            "per_call": args.per_call,
            "shape": shape,
            "requests": args.requests,
            "max_batch": args.max_batch,
            "callers_as": args.callers_as,
            "prepare": args.prepare,
            "target": 5.0,
        },
    )
    print(
        f"reward_server ratio (server moves/s, {shape} / one request per forward pass, median of {args.runs}): {ratio:.2f} (target >= 5)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
