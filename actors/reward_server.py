"""The RewardServer: a reward model behind an async Ray actor that gathers concurrent requests
into batches (an asyncio queue with a timed flush), and :class:`RewardClient`, a plain handle
that spreads requests over several replicas and returns the answers in order.

    client = RewardClient.create("runs/demo/reward/model", replicas=2, run="demo")
    client.score([RewardQuery(("e2e4", "e7e5"), "g1f3"), {"moves": [], "move": "e2e4"}])  # [0.41, -0.2]

Each request waits in the queue until ``max_batch`` requests are there or ``max_wait_ms`` passed
since the first one; then one forward pass scores them all (in a thread, so the actor keeps
taking requests). A request for an illegal move or a bad FEN fails for that caller only (an
:class:`~chessrl.reward.InvalidQueryError`); the others in its batch get their scores. The actor
is named ``<run>/reward-server-<i>``, restarts after a crash (``max_restarts``; a call in flight
is retried, so a caller gets its answer late, or one clear error once the retries are spent), and
exports Ray metrics: requests, batch sizes, queue depth, latency. The text and the
normalisation are :mod:`chessrl.reward`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.util import metrics

from chessrl.reward import RewardQuery


@ray.remote(num_cpus=1, max_restarts=4, max_task_retries=4)
class RewardServer:
    """One replica: the model, the queue and the batching loop."""

    def __init__(
        self, model_path: str, name: str = "reward-server", max_batch: int = 64, max_wait_ms: float = 5.0,
        threads: int | None = None,
    ) -> None:  # fmt: skip
        import torch

        from chessrl.reward import Normalizer, load_reward_model, reward_format

        if threads:
            torch.set_num_threads(threads)
        self.model, self.tokenizer = load_reward_model(model_path)
        self.normalizer = Normalizer.from_config(self.model.config)
        self.text_format = reward_format(self.model.config)  # what it reads: the moves, or the board
        self.pad = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1000
        self.queue: asyncio.Queue[tuple[list[int], asyncio.Future[float], float]] | None = None
        self.batches = 0
        tags = ("server",)
        self._tags = {"server": name}
        self._requests = metrics.Counter("chessrl_reward_requests", "Moves scored", tag_keys=tags)
        self._batch = metrics.Histogram(
            "chessrl_reward_batch_size", "Requests per forward pass", [1, 4, 16, 64, 256], tag_keys=tags
        )
        self._depth = metrics.Gauge("chessrl_reward_queue_depth", "Requests waiting", tag_keys=tags)
        self._latency = metrics.Histogram(
            "chessrl_reward_latency_s", "Seconds from request to answer", [0.001, 0.01, 0.05, 0.2, 1, 5], tag_keys=tags
        )  # fmt: skip

    def _queue(self) -> asyncio.Queue[tuple[list[int], asyncio.Future[float], float]]:
        if self.queue is None:  # made in the actor's own event loop, with the loop that serves it
            self.queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._serve())
        return self.queue

    async def score(self, query: dict[str, Any] | RewardQuery, normalized: bool = True) -> float:
        """The reward model's score of one move (normalised by the mean and std saved with it)."""
        from chessrl.reward import query_ids

        q = query if isinstance(query, RewardQuery) else RewardQuery.from_dict(query)
        board = q.validate()  # an InvalidQueryError goes back to this caller only
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        queue = self._queue()
        await queue.put((query_ids(self.tokenizer, q, self.text_format, board), future, time.perf_counter()))
        self._depth.set(queue.qsize(), tags=self._tags)
        raw = await future
        return self.normalizer.apply(raw) if normalized else raw

    async def score_batch(
        self, queries: Sequence[dict[str, Any] | RewardQuery], normalized: bool = True
    ) -> list[float]:
        """Many moves in one call (one round trip for a rollout step); they share the queue with
        single calls, so they may be scored together. An invalid query fails the whole call."""
        from chessrl.reward import query_ids

        qs = [q if isinstance(q, RewardQuery) else RewardQuery.from_dict(q) for q in queries]
        boards = [q.validate() for q in qs]
        loop = asyncio.get_running_loop()
        queue = self._queue()
        futures: list[asyncio.Future[float]] = []
        for q, board in zip(qs, boards, strict=True):
            future: asyncio.Future[float] = loop.create_future()
            await queue.put(
                (query_ids(self.tokenizer, q, self.text_format, board), future, time.perf_counter())
            )
            futures.append(future)
        self._depth.set(queue.qsize(), tags=self._tags)
        raw = await asyncio.gather(*futures)
        return [self.normalizer.apply(r) if normalized else r for r in raw]

    async def _serve(self) -> None:
        from chessrl.reward import score_ids

        queue = self._queue()
        while True:
            batch = [await queue.get()]
            deadline = time.perf_counter() + self.max_wait_s
            while len(batch) < self.max_batch:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), left))
                except TimeoutError:
                    break
            try:
                scores = await asyncio.to_thread(
                    score_ids, self.model, [ids for ids, _, _ in batch], self.pad
                )
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
        import os

        return {
            "batches": self.batches,
            "queued": self.queue.qsize() if self.queue else 0,
            "pid": os.getpid(),
        }


class RewardClient:
    """Requests spread over replicas round-robin; answers in the order of the queries."""

    def __init__(self, actors: Sequence[Any]) -> None:
        if not actors:
            raise ValueError("a reward client needs at least one RewardServer")
        self.actors = list(actors)
        self._next = itertools.cycle(range(len(self.actors)))

    @classmethod
    def create(
        cls, model_path: str, replicas: int = 1, *, run: str = "chess-rl", max_batch: int = 64,
        max_wait_ms: float = 5.0, num_cpus: float = 1.0, threads: int | None = None,
    ) -> RewardClient:  # fmt: skip
        """Start ``replicas`` named servers (``<run>/reward-server-<i>``) and wait until they are up."""
        actors = [
            RewardServer.options(name=f"{run}/reward-server-{i}", num_cpus=num_cpus).remote(
                model_path, f"{run}/reward-server-{i}", max_batch, max_wait_ms, threads
            )
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

    def score_batch(
        self, queries: Sequence[RewardQuery | dict[str, Any]], normalized: bool = True
    ) -> list[float]:
        """The scores, in order, from one call per replica (the queries split evenly among them)."""
        if not queries:
            return []
        n = len(self.actors)
        size = -(-len(queries) // n)
        chunks = [list(queries[i : i + size]) for i in range(0, len(queries), size)]
        refs = [self.actors[next(self._next)].score_batch.remote(c, normalized) for c in chunks]
        out: list[float] = []
        for ref in refs:
            try:
                out += ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                raise exc.cause from None
        return out

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
