"""The RewardServer: a reward model behind an async Ray actor that gathers concurrent requests
into batches (an asyncio queue with a timed flush), and :class:`RewardClient`, a plain handle
that spreads requests over several replicas and returns the answers in order.

    client = RewardClient.create("runs/demo/reward/model", replicas=2, run="demo")
    client.score([RewardQuery(("e2e4", "e7e5"), "g1f3"), {"moves": [], "move": "e2e4"}])  # [0.41, -0.2]
    client.score_many([RewardQuery((), "e2e4"), RewardQuery((), "e2e5")])  # [0.3, InvalidQueryError(...)]

Each request waits in the queue until ``max_batch`` requests are there or ``max_wait_ms`` passed
since the first one; then one forward pass scores them all (in a thread, so the actor keeps
taking requests). A request for an illegal move or a bad FEN fails for that caller only (an
:class:`~chessrl.rl.reward.InvalidQueryError`); the others in its batch get their scores. The actor
is named ``<run>/reward-server-<i>``, restarts after a crash (``max_restarts``; a call in flight
is retried, so a caller gets its answer late, or one clear error once the retries are spent), and
exports Ray metrics: requests, batch sizes, queue depth, latency. The text and the
normalisation are :mod:`chessrl.rl.reward`'s.

Many moves go in one call, each answered with its score or its own error:
:meth:`RewardServer.score_many` checks and tokenises them in a worker thread (off the event
loop); a rollout collector does that itself and sends ids (:meth:`RewardServer.score_ids_many`,
``RewardClient(..., prepare_here=True)``). Either way the items are queued one by one beside
every other caller's.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from ray.util import metrics

from chessrl.rl.reward import InvalidQueryError, RewardQuery


@ray.remote(num_cpus=1, max_restarts=4, max_task_retries=4)
class RewardServer:
    """One replica: the model, the queue and the batching loop."""

    def __init__(
        self,
        model_path: str,
        name: str = "reward-server",
        max_batch: int = 64,
        max_wait_ms: float = 5.0,
        threads: int | None = None,
    ) -> None:
        import torch

        from actors.device import actor_device
        from chessrl.arena.saved_models import load_saved_model
        from chessrl.rl.reward import Normalizer, PositionCache, reward_format

        if threads:
            torch.set_num_threads(threads)
        self.model, self.tokenizer = load_saved_model(model_path, "reward")
        self.model.to(actor_device())  # its GPU when started with num_gpus
        self.normalizer = Normalizer.from_config(self.model.config)
        self.text_format = reward_format(self.model.config)  # what it reads: the moves, or the board
        self.pad = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1000
        self.queue: asyncio.Queue[tuple[list[int], asyncio.Future[float], float]] | None = None
        self.batches, self.forward_s, self.prepare_s = 0, 0.0, 0.0
        self.positions = PositionCache()  # a collector's games, step after step: only new moves replayed
        self._preparer = ThreadPoolExecutor(
            1, thread_name_prefix="prepare"
        )  # one thread: the cache is not shared
        # forward passes one at a time, in a thread of their own (the event loop keeps taking calls)
        self._forward = ThreadPoolExecutor(1, thread_name_prefix="forward")
        tags = ("server",)
        self._tags = {"server": name}
        self._requests = metrics.Counter("chessrl_reward_requests", "Moves scored", tag_keys=tags)
        self._batch = metrics.Histogram(
            "chessrl_reward_batch_size", "Requests per forward pass", [1, 4, 16, 64, 256], tag_keys=tags
        )
        self._depth = metrics.Gauge("chessrl_reward_queue_depth", "Requests waiting", tag_keys=tags)
        self._latency = metrics.Histogram(
            "chessrl_reward_latency_s",
            "Seconds from request to answer",
            [0.001, 0.01, 0.05, 0.2, 1, 5],
            tag_keys=tags,
        )

    def _queue(self) -> asyncio.Queue[tuple[list[int], asyncio.Future[float], float]]:
        if self.queue is None:  # made in the actor's own event loop, with the loop that serves it
            self.queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._serve())
        return self.queue

    async def score(self, query: dict[str, Any] | RewardQuery, normalized: bool = True) -> float:
        """The reward model's score of one move (normalised by the mean and std saved with it);
        an invalid query raises its :class:`InvalidQueryError` to this caller only."""
        [out] = await self.score_many([query], normalized)
        if isinstance(out, InvalidQueryError):
            raise out
        return out

    def _prepare(
        self, queries: Sequence[dict[str, Any] | RewardQuery]
    ) -> list[list[int] | InvalidQueryError]:
        from chessrl.rl.reward import prepare_queries

        return prepare_queries(self.tokenizer, self.text_format, self.positions, queries)

    async def score_many(
        self, queries: Sequence[dict[str, Any] | RewardQuery], normalized: bool = True
    ) -> list[float | InvalidQueryError]:
        """Many moves in one call (a rollout step's moves): each item's score, in order, or its own
        :class:`InvalidQueryError` in its place (the rest are scored). Validation and
        tokenisation run in a worker thread, so the event loop keeps taking calls; the items share
        the queue with every other caller's, so they may be scored together."""
        started = time.perf_counter()
        prepared = await asyncio.get_running_loop().run_in_executor(self._preparer, self._prepare, queries)
        self.prepare_s += time.perf_counter() - started
        return await self._scored(prepared, normalized)

    async def score_ids_many(
        self, rows: Sequence[Sequence[int]], normalized: bool = True
    ) -> list[float | InvalidQueryError]:
        """:meth:`score_many` for callers that did the preparation themselves (the ids of
        :func:`~chessrl.rl.reward.query_ids` in the model's :meth:`reader`): nothing but the forward
        pass is left to the server. A row that is not this model's ids gets its own error."""
        config = self.model.config
        vocab = config.vocab_size
        longest = (
            getattr(config, "n_positions", None)
            or getattr(config, "max_position_embeddings", None)
            or 1 << 20
        )
        prepared: list[list[int] | InvalidQueryError] = []
        for i, row in enumerate(rows):
            ids = list(row)
            if not ids or len(ids) > longest or min(ids) < 0 or max(ids) >= vocab:
                prepared.append(
                    InvalidQueryError(
                        f"row {i}: not token ids of this reward model (1 to {longest} ids in [0, {vocab}); got {len(ids)})"
                    )
                )
            else:
                prepared.append(ids)
        return await self._scored(prepared, normalized)

    def reader(self) -> tuple[Any, str]:
        """What a caller needs to prepare queries itself: the tokenizer and the text format's name."""
        return self.tokenizer, self.text_format.name

    async def _scored(
        self, prepared: list[list[int] | InvalidQueryError], normalized: bool
    ) -> list[float | InvalidQueryError]:
        loop, queue, now = asyncio.get_running_loop(), self._queue(), time.perf_counter()
        futures: list[asyncio.Future[float]] = []
        for item in prepared:
            if not isinstance(item, InvalidQueryError):
                futures.append(loop.create_future())
                queue.put_nowait((item, futures[-1], now))
        self._depth.set(queue.qsize(), tags=self._tags)
        raw = iter(await asyncio.gather(*futures))
        return [
            item if isinstance(item, InvalidQueryError) else self._normalize(next(raw), normalized)
            for item in prepared
        ]

    def _normalize(self, raw: float, normalized: bool) -> float:
        return self.normalizer.apply(raw) if normalized else raw

    async def _serve(self) -> None:
        from chessrl.rl.reward import score_ids

        queue = self._queue()
        while True:
            batch = [await queue.get()]
            deadline = time.perf_counter() + self.max_wait_s
            while len(batch) < self.max_batch:
                if not queue.empty():  # what is already there, without a timed wait per item
                    batch.append(queue.get_nowait())
                    continue
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), left))
                except TimeoutError:
                    break
            try:
                started = time.perf_counter()
                scores = await asyncio.get_running_loop().run_in_executor(
                    self._forward, score_ids, self.model, [ids for ids, _, _ in batch], self.pad
                )
                self.forward_s += time.perf_counter() - started
            except Exception as exc:  # the model failed: every caller in the batch hears it
                for _, future, _ in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            now = time.perf_counter()
            for (_, future, started), value in zip(batch, scores, strict=True):
                if not future.done():
                    future.set_result(value)
                self._latency.observe(now - started, tags=self._tags)
            self.batches += 1
            self._requests.inc(len(batch), tags=self._tags)
            self._batch.observe(len(batch), tags=self._tags)
            self._depth.set(queue.qsize(), tags=self._tags)

    async def stats(self) -> dict[str, Any]:
        """Forward passes so far, seconds spent in them and in checking/tokenising, queue, pid."""
        import os

        return {
            "batches": self.batches,
            "forward_s": self.forward_s,
            "prepare_s": self.prepare_s,
            "queued": self.queue.qsize() if self.queue else 0,
            "pid": os.getpid(),
        }


class RewardClient:
    """Requests spread over replicas round-robin; answers in the order of the queries.

    ``prepare_here``: :meth:`score_many` checks and tokenises the queries in the caller's process
    (the server's tokenizer and text format, fetched once; a cache of the caller's games) and
    sends token ids, so the shared server does nothing but forward passes. A rollout collector
    does this: it has a CPU of its own and asks about the same games step after step.
    """

    def __init__(self, actors: Sequence[Any], prepare_here: bool = False) -> None:
        if not actors:
            raise ValueError("a reward client needs at least one RewardServer")
        self.actors = list(actors)
        self._next = itertools.cycle(range(len(self.actors)))
        self.prepare_here = prepare_here
        self._reader: tuple[Any, Any, Any] | None = None  # tokenizer, format, position cache

    @classmethod
    def create(
        cls,
        model_path: str,
        replicas: int = 1,
        *,
        run: str = "chess-rl",
        max_batch: int = 64,
        max_wait_ms: float = 5.0,
        num_cpus: float = 1.0,
        threads: int | None = None,
        num_gpus: float = 0.0,
    ) -> RewardClient:
        """Start ``replicas`` named servers (``<run>/reward-server-<i>``, ``num_gpus`` each: their
        forward passes on that GPU) and wait until they are up."""
        actors = [
            RewardServer.options(
                name=f"{run}/reward-server-{i}", num_cpus=num_cpus, num_gpus=num_gpus
            ).remote(model_path, f"{run}/reward-server-{i}", max_batch, max_wait_ms, threads)
            for i in range(replicas)
        ]
        ray.get([a.stats.remote() for a in actors])
        return cls(actors)

    def submit(self, queries: Sequence[RewardQuery | dict[str, Any]], normalized: bool = True) -> list[Any]:
        """One ObjectRef a query (each resolves to its score or raises its own error)."""
        return [self.actors[next(self._next)].score.remote(q, normalized) for q in queries]

    def score(self, queries: Sequence[RewardQuery | dict[str, Any]], normalized: bool = True) -> list[float]:
        """The scores, in order; the first failed query's error is raised (its own, unwrapped)."""
        out = []
        for ref in self.submit(queries, normalized):
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:
                raise exc.cause from None
        return out

    def score_many(
        self, queries: Sequence[RewardQuery | dict[str, Any]], normalized: bool = True
    ) -> list[float | InvalidQueryError]:
        """Each query's score, or its own :class:`~chessrl.rl.reward.InvalidQueryError` in its place,
        in order, from one call per replica (the queries split evenly among them). A server that
        dies mid-call is restarted and the call retried; once the retries are spent the caller
        gets Ray's error, never a hang."""
        if not queries:
            return []
        if not self.prepare_here:
            return self._spread("score_many", list(queries), normalized)
        from chessrl.lm.formats import get_format
        from chessrl.rl.reward import PositionCache, prepare_queries

        if self._reader is None:
            tokenizer, fmt = ray.get(self.actors[0].reader.remote())
            self._reader = (tokenizer, get_format(fmt), PositionCache())
        prepared = prepare_queries(*self._reader, queries)
        rows = [p for p in prepared if not isinstance(p, InvalidQueryError)]
        scores = iter(self._spread("score_ids_many", rows, normalized) if rows else [])
        return [p if isinstance(p, InvalidQueryError) else next(scores) for p in prepared]

    def _spread(self, method: str, items: list[Any], normalized: bool) -> list[Any]:
        size = -(-len(items) // len(self.actors))
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        refs = [getattr(self.actors[next(self._next)], method).remote(c, normalized) for c in chunks]
        out: list[Any] = []
        for ref in refs:
            try:
                out += ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                raise exc.cause from None
        return out

    def score_batch(
        self, queries: Sequence[RewardQuery | dict[str, Any]], normalized: bool = True
    ) -> list[float]:
        """:meth:`score_many`, raising the first invalid query's error."""
        out = self.score_many(queries, normalized)
        for item in out:
            if isinstance(item, InvalidQueryError):
                raise item
        return out  # type: ignore[return-value]

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
