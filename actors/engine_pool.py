"""EnginePool: Stockfish processes as long-lived Ray actors, several actors behind one handle.

    pool = EnginePool.spread(4, run="demo")   # 4 engines over the nodes: one actor a node, each its share
    [a] = pool.analyse(["6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"], SearchLimit(nodes=20_000))
    a.best_move, a.score.mate        # ('d1d8', 1)
    pool.play(fen, SearchLimit(nodes=5_000), strength=Strength(elo=1500))
    pool.shutdown()

Each ``EnginePoolActor`` is a thin shell around :class:`chessrl.engine.group.EngineGroup` (one
Stockfish per CPU it holds, a watchdog on every search, an LRU cache, a bounded queue): it adds
resources, a name (``<run>/engine-pool-<i>``), restarts and Ray metrics. :class:`EnginePool` is a
plain class, not an actor: it splits a batch into chunks, spreads them over the actors with a
bounded number in flight per actor, waits and resubmits when an actor's queue is full, and puts
the answers back in order, so a caller never cares where an engine lives.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import chess
import ray
from ray.util import metrics

from chessrl.engine.annotation import Annotation
from chessrl.engine.client import (
    Analysis,
    EngineNotFoundError,
    PoolBusyError,
    Score,
    SearchLimit,
    Strength,
    board_from,
)
from chessrl.engine.group import EngineGroup, per_position
from cluster.errors import ConfigError

LATENCY_BOUNDARIES_S = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


@dataclass(frozen=True)
class PoolSettings:
    """How each pool actor runs its engines."""

    engines_per_actor: int = 1
    path: str | None = None
    hash_mb: int = 16
    timeout_s: float = 10.0
    retries: int = 2
    cache_size: int = 100_000
    max_queue: int = 20_000


@ray.remote(max_restarts=3, max_task_retries=2)
class EnginePoolActor:
    """One node's share of the pool: an EngineGroup plus metrics. No chess logic of its own."""

    def __init__(self, name: str, settings: dict[str, Any]) -> None:
        s = PoolSettings(**settings)
        self.name = name
        self.group = EngineGroup(
            s.engines_per_actor,
            path=s.path,
            hash_mb=s.hash_mb,
            timeout_s=s.timeout_s,
            retries=s.retries,
            cache_size=s.cache_size,
            max_queue=s.max_queue,
        )
        tags = ("pool",)
        self._tags = {"pool": name}
        self._positions = metrics.Counter(
            "chessrl_engine_positions", "Positions answered by the engine pool", tag_keys=tags
        )
        self._cache_hits = metrics.Counter(
            "chessrl_engine_cache_hits", "Engine pool cache hits", tag_keys=tags
        )
        self._restarts = metrics.Counter(
            "chessrl_engine_restarts", "Engine processes restarted", tag_keys=tags
        )
        self._queue = metrics.Gauge(
            "chessrl_engine_queue_depth", "Positions queued or in search", tag_keys=tags
        )
        self._latency = metrics.Histogram(
            "chessrl_engine_latency_s", "Seconds per engine search", LATENCY_BOUNDARIES_S, tag_keys=tags
        )
        self._reported = self.group.snapshot()
        self._latencies_seen = 0

    def _export(self) -> None:
        now = self.group.snapshot()
        for counter, key in (
            (self._positions, "positions"),
            (self._cache_hits, "cache_hits"),
            (self._restarts, "restarts"),
        ):
            delta = now[key] - self._reported[key]
            if delta > 0:
                counter.inc(delta, tags=self._tags)
        self._queue.set(now["queue_depth"], tags=self._tags)
        latencies = self.group.stats.latencies_s
        start = min(self._latencies_seen, len(latencies))
        for value in latencies[start:]:
            self._latency.observe(value, tags=self._tags)
        self._latencies_seen = len(latencies)
        self._reported = now

    def analyse(
        self,
        positions: list[str],
        limit: SearchLimit | list[SearchLimit],
        *,
        multipv: int = 1,
        fresh: bool = False,
    ) -> list[Analysis]:
        self._queue.set(self.group.snapshot()["queue_depth"] + len(positions), tags=self._tags)
        try:
            return self.group.analyse(positions, limit, multipv=multipv, fresh=fresh)
        finally:
            self._export()

    def annotate(self, fens: list[str], nodes_per_move: int) -> list[Annotation]:
        self._queue.set(self.group.snapshot()["queue_depth"] + len(fens), tags=self._tags)
        try:
            return self.group.annotate(fens, nodes_per_move)
        finally:
            self._export()

    def score_moves(self, fen: str, moves: list[str], limit: SearchLimit) -> list[Score]:
        try:
            return self.group.score_moves(fen, moves, limit)
        finally:
            self._export()

    def play(
        self, position: str, limit: SearchLimit, *, strength: Strength | None = None, fresh: bool = False
    ) -> str:
        try:
            return self.group.play(position, limit, strength=strength, fresh=fresh)
        finally:
            self._export()

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, **self.group.snapshot()}

    def pids(self) -> list[int | None]:
        return self.group.pids

    def __repr__(self) -> str:  # shown in the dashboard
        return f"EnginePoolActor({self.name})"


class EnginePool:
    """Several EnginePoolActors behind one handle (a plain class; pass it to tasks freely).

    ``engines``: each actor's Stockfish count (one number for all of them, or one per actor:
    :meth:`spread` makes actors of different sizes, one per node)."""

    def __init__(
        self,
        actors: Sequence[Any],
        engines: int | Sequence[int],
        *,
        max_inflight_per_actor: int | None = None,
        max_queue: int = PoolSettings.max_queue,
    ) -> None:
        if not actors:
            raise ValueError("an engine pool needs at least one actor")
        self.actors = list(actors)
        counts = [int(engines)] * len(self.actors) if isinstance(engines, int) else [int(n) for n in engines]
        if len(counts) != len(self.actors) or min(counts) < 1:
            raise ValueError(
                f"engine counts {counts} do not match {len(self.actors)} actor(s) of at least one engine"
            )
        self.engine_counts = counts
        self.max_queue = max_queue  # each actor's queue bound: no chunk may be bigger
        self.max_inflight = [max_inflight_per_actor or 2 * n for n in counts]
        self._next = itertools.cycle(range(len(self.actors)))

    @property
    def engines(self) -> int:
        """Stockfish processes over every actor."""
        return sum(self.engine_counts)

    @classmethod
    def create(
        cls,
        n_actors: int = 1,
        engines_per_actor: int = 1,
        *,
        run: str = "chess-rl",
        settings: PoolSettings | None = None,
        num_cpus_per_engine: float = 1.0,
    ) -> EnginePool:
        """Start ``n_actors`` named actors (``<run>/engine-pool-<i>``) of ``engines_per_actor``
        engines each, spread over the cluster (each must fit a node: :meth:`spread` sizes them
        to the nodes)."""
        actors = [
            _start_actor(f"{run}/engine-pool-{i}", engines_per_actor, settings, num_cpus_per_engine, "SPREAD")
            for i in range(n_actors)
        ]
        return cls._started(actors, [engines_per_actor] * n_actors, settings)

    @classmethod
    def spread(
        cls,
        engines: int,
        *,
        run: str = "chess-rl",
        settings: PoolSettings | None = None,
        num_cpus_per_engine: float = 1.0,
        key: str = "engines",
        log: Callable[[str], None] | None = None,
    ) -> EnginePool:
        """``engines`` Stockfish processes over the cluster's nodes: one actor per node, each
        with that node's share (:func:`engine_split`), so no actor asks for more CPUs than its
        node has (one actor holding them all waits forever where no node is that big). Each
        actor prefers its node (soft affinity: it runs elsewhere if the node has gone).
        On a cluster with an autoscaler the nodes it can start count too: the shares are planned
        over the alive nodes and the fewest new ones, and the driver asks for those and waits,
        its progress lines in ``log`` (:func:`cluster.capacity.ensure`), before starting the
        actors. ``engines`` beyond what the nodes (and node types) can hold is one
        :class:`~cluster.errors.ConfigError` naming ``key``."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from cluster.capacity import ensure, read_capacity

        cap = read_capacity()
        if cap.autoscales:
            plan = engine_split(
                engines,
                cap.engine_nodes(engines, num_cpus_per_engine),
                num_cpus_per_engine,
                key=key,
                nodes=cap.describe(),
            )
            bundles = [{"CPU": count * num_cpus_per_engine} for count in plan if count]
            ensure(bundles, what=f"{key} {engines}", log=log, capacity=cap)
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        split = engine_split(engines, [n["Resources"]["CPU"] for n in nodes], num_cpus_per_engine, key=key)
        actors, counts = [], []
        for node, count in zip(nodes, split, strict=True):
            if count:
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=True)
                actors.append(
                    _start_actor(
                        f"{run}/engine-pool-{len(actors)}", count, settings, num_cpus_per_engine, strategy
                    )
                )
                counts.append(count)
        return cls._started(actors, counts, settings)

    @classmethod
    def _started(cls, actors: list[Any], counts: list[int], settings: PoolSettings | None) -> EnginePool:
        pool = cls(actors, counts, max_queue=(settings or PoolSettings()).max_queue)
        try:
            ray.get([a.stats.remote() for a in actors])  # engines are up (or the error surfaces here)
        except ray.exceptions.RayActorError as exc:
            pool.shutdown()
            # An actor that failed in its constructor carries only the text of the error: give a
            # missing engine back to the user as the one-line EngineNotFoundError it was.
            for line in str(exc).splitlines():
                if "EngineNotFoundError:" in line:
                    raise EngineNotFoundError(line.split("EngineNotFoundError:", 1)[1].strip()) from None
            raise
        return pool

    # -- batched calls --------------------------------------------------------------------------
    def analyse(
        self,
        positions: Sequence[str | chess.Board],
        limit: SearchLimit | Sequence[SearchLimit],
        *,
        multipv: int = 1,
        fresh: bool = False,
        chunk_size: int | None = None,
    ) -> list[Analysis]:
        """Analyse positions (FENs or boards) over every actor
        (:meth:`chessrl.engine.group.EngineGroup.analyse`); answers in input order (one limit, or
        one each); ``chunk_size`` positions a request (default: the batch spread over twice the
        engines, at most 32)."""
        fens = [p.fen() if isinstance(p, chess.Board) else board_from(p).fen() for p in positions]
        limits = per_position(limit, len(fens))
        return self._spread(
            fens,
            lambda actor, start, chunk: actor.analyse.remote(
                chunk, limits[start : start + len(chunk)], multipv=multipv, fresh=fresh
            ),
            chunk_size,
        )

    def annotate(
        self, fens: Sequence[str], nodes_per_move: int, *, chunk_size: int | None = None
    ) -> list[Annotation]:
        """Stockfish's value of every legal move of each position
        (:meth:`chessrl.engine.group.EngineGroup.annotate`), over every actor, in input order.
        The FENs are checked where the engines are (a bad one raises there): the driver only
        splits, sends and gathers."""
        return self._spread(
            list(fens), lambda actor, start, chunk: actor.annotate.remote(chunk, nodes_per_move), chunk_size
        )

    def _spread(self, fens: list[str], call: Any, chunk_size: int | None) -> list[Any]:
        """``call(actor, start, chunk)`` over chunks of ``fens`` spread over the actors, at most
        ``max_inflight`` chunks in flight an actor (back-pressure: a full actor's chunk is sent
        again shortly); the answers in input order."""
        if not fens:
            return []
        slots = self.engines
        size = min(chunk_size or max(1, min(32, -(-len(fens) // (2 * slots)))), self.max_queue)
        chunks = [(start, fens[start : start + size]) for start in range(0, len(fens), size)]
        results: list[Any] = [None] * len(fens)
        pending: dict[Any, tuple[int, int, list[str]]] = {}
        inflight = [0] * len(self.actors)
        queue = list(reversed(chunks))
        while queue or pending:
            while queue:
                actor_index = self._free_actor(inflight)
                if actor_index is None:
                    break
                start, chunk = queue.pop()
                ref = call(self.actors[actor_index], start, chunk)
                pending[ref] = (actor_index, start, chunk)
                inflight[actor_index] += 1
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                actor_index, start, chunk = pending.pop(ref)
                inflight[actor_index] -= 1
                try:
                    answers = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc.cause, PoolBusyError):  # back-pressure: try again shortly
                        queue.append((start, chunk))
                        time.sleep(0.05)
                        continue
                    raise exc.cause if isinstance(exc.cause, Exception) else exc from None
                results[start : start + len(answers)] = answers
        return [r for r in results if r is not None]

    def _free_actor(self, inflight: list[int]) -> int | None:
        for _ in range(len(self.actors)):
            i = next(self._next)
            if inflight[i] < self.max_inflight[i]:
                return i
        return None

    def score_moves(self, position: str, moves: Sequence[str], limit: SearchLimit) -> list[Score]:
        actor = self.actors[next(self._next)]
        return _unwrap(lambda: ray.get(actor.score_moves.remote(position, list(moves), limit)))

    def play(
        self, position: str, limit: SearchLimit, *, strength: Strength | None = None, fresh: bool = False
    ) -> str:
        """A move (UCI) in ``position`` (a FEN) at ``strength`` (full strength when None), from the
        next actor: :meth:`chessrl.engine.group.EngineGroup.play`."""
        actor = self.actors[next(self._next)]
        return _unwrap(lambda: ray.get(actor.play.remote(position, limit, strength=strength, fresh=fresh)))

    def play_many(
        self,
        positions: Sequence[str],
        limit: SearchLimit | Sequence[SearchLimit],
        *,
        strength: Strength | Sequence[Strength] | None = None,
        fresh: bool = False,
    ) -> list[str]:
        """One move per position, spread over the actors (for many games advancing in step);
        ``limit`` and ``strength`` are one for all, or one per position."""
        limits = per_position(limit, len(positions))
        strengths: list[Strength | None] = (
            list(strength) if isinstance(strength, Sequence) else [strength] * len(positions)
        )
        refs = [
            self.actors[i % len(self.actors)].play.remote(fen, lim, strength=each, fresh=fresh)
            for i, (fen, lim, each) in enumerate(zip(positions, limits, strengths, strict=True))
        ]
        return _unwrap(lambda: list(ray.get(refs)))

    # -- bookkeeping ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Summed counters of every actor, plus each actor's own."""
        per_actor = ray.get([a.stats.remote() for a in self.actors])
        keys = [k for k in per_actor[0] if k != "name"]
        total = {k: sum(s[k] for s in per_actor) for k in keys}
        return {**total, "actors": per_actor}

    def pids(self) -> list[list[int | None]]:
        return ray.get([a.pids.remote() for a in self.actors])

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)


def engine_split(
    engines: int,
    node_cpus: Sequence[float],
    cpus_per_engine: float = 1.0,
    *,
    key: str = "engines",
    nodes: str | None = None,
) -> list[int]:
    """Engines per node: ``engines`` spread over nodes of ``node_cpus`` CPUs, each node holding
    at most ``floor(cpus / cpus_per_engine)`` of them, filled in proportion to what each holds
    (one at a time to the node with the most room left, ties to the first). ``nodes`` says, in
    the error, what ``node_cpus`` are when they are not just the alive nodes (an autoscaler's
    node types among them: :meth:`cluster.capacity.Capacity.describe`).

    >>> engine_split(5, [2, 3])
    [2, 3]
    >>> engine_split(4, [2, 3])
    [2, 2]
    >>> engine_split(3, [16, 2], 0.5)   # 32 and 4 engines' room: each node gets some
    [2, 1]
    >>> engine_split(6, [2, 3])
    Traceback (most recent call last):
    ...
    cluster.errors.ConfigError: engines 6 needs 6 CPUs at 1 each; the cluster's nodes hold 5 engines (2 node(s), the largest 3 CPUs): ask for at most 5
    """
    if engines < 1:
        raise ConfigError(f"{key} must be at least 1, got {engines}")
    room = [int(c / cpus_per_engine + 1e-9) for c in node_cpus]
    if engines > sum(room):
        where = (
            f"the cluster's nodes hold {sum(room)} engines ({len(room)} node(s), the largest {max(node_cpus, default=0):g} CPUs)"
            if nodes is None
            else f"the cluster can hold {sum(room)} engines at most ({nodes})"
        )
        raise ConfigError(
            f"{key} {engines} needs {engines * cpus_per_engine:g} CPUs at {cpus_per_engine:g} each; {where}: "
            f"ask for at most {sum(room)}"
        )
    split = [0] * len(room)
    for _ in range(engines):
        best = max(range(len(room)), key=lambda i: ((room[i] - split[i]) / max(room[i], 1), -i))
        split[best] += 1
    return split


def _start_actor(
    name: str, engines: int, settings: PoolSettings | None, num_cpus_per_engine: float, strategy: Any
) -> Any:
    s = settings or PoolSettings(engines_per_actor=engines)
    if s.engines_per_actor != engines:
        s = PoolSettings(**{**asdict(s), "engines_per_actor": engines})
    return EnginePoolActor.options(
        name=name,
        num_cpus=num_cpus_per_engine * engines,
        max_concurrency=4 * engines + 4,
        scheduling_strategy=strategy,
    ).remote(name, asdict(s))


def _unwrap(call: Any) -> Any:
    """Re-raise an actor's own exception (InvalidPositionError, EngineError) instead of Ray's wrapper."""
    try:
        return call()
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, Exception):
            raise exc.cause from None
        raise
