"""Self-play actors: SelfPlayCollectors (batched MCTS games written as replay shards), fed by the
:class:`~actors.parameter_server.ParameterServer` (versioned weights, shared with PPO and GRPO).

    server = ParameterServer.options(name="demo/parameter-server").remote()
    ray.get(server.publish.remote(state_dict, 1))
    collectors = [SelfPlayCollector.options(name=f"demo/selfplay-collector-{i}").remote(spec, i)
                  for i in range(2)]
    runs = [c.run.remote() for c in collectors]        # until server.stop() is called

The collector is a thin shell: the games are :class:`chessrl.search.selfplay.SelfPlay`, the shards
:mod:`chessrl.search.replay`. A collector asks the server for "weights newer than v" between moves,
and, after each shard, puts a note of it on the learner's bounded queue (it waits there when
the learner is behind: backpressure). A killed collector is restarted by Ray (``max_restarts``)
and its ``run`` call retried (``max_task_retries``): it resumes its shard numbering from what is
on storage, so no shard is written twice or half. What it had not yet written is lost: games in
flight, finished positions short of a shard, and the note of a shard written just before the
kill (that shard stays on storage; a resumed learner's window does not list it).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import ray
from ray.util import metrics

from actors.collector_status import CollectorStatus
from chessrl.search.mcts import MCTSConfig
from chessrl.search.network import NetConfig
from chessrl.search.selfplay import SelfPlaySettings


@dataclass(frozen=True)
class CollectorSpec:
    """What every collector of a run needs (picklable)."""

    run: str
    replay_uri: str
    status_uri: str
    net: NetConfig
    mcts: MCTSConfig
    settings: SelfPlaySettings
    shard_positions: int
    seed: int
    server_name: str
    namespace: str
    device: str = "cpu"
    #: Names the driver's invocation: ``starts`` counts the restarts within one.
    invocation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)
class SelfPlayCollector(CollectorStatus):
    """B games at once with batched MCTS; finished games go to fixed-size replay shards."""

    def __init__(self, spec: CollectorSpec, index: int, queue: Any) -> None:
        from chessrl.search.replay import list_shards, remove_partial_shards, shard_age
        from cluster.storage import Storage

        self.spec, self.index, self.queue = spec, index, queue
        self.replay = Storage.from_uri(spec.replay_uri)
        remove_partial_shards(self.replay, index)  # a killed start's shard, half written
        self.status = Storage.from_uri(spec.status_uri)
        mine = [rel for rel in list_shards(self.replay) if f"/shard-{index:02d}-" in rel]
        self.next_shard = 1 + max((shard_age(rel)[1] for rel in mine), default=-1)
        previous = self._read_status()
        same = previous.get("invocation") == spec.invocation
        #: Starts in this invocation (restarts are ``starts - 1``), and over the run's whole life.
        self.starts = int(previous.get("starts", 0)) + 1 if same else 1
        self.lifetime_starts = int(previous.get("lifetime_starts", previous.get("starts", 0))) + 1
        self._write_status(state="starting")
        tags = {"collector": f"{spec.run}/selfplay-collector-{index}"}
        self._games = metrics.Counter(
            "chessrl_selfplay_games", "Self-play games finished", tag_keys=("collector",)
        )
        self._positions = metrics.Counter(
            "chessrl_selfplay_positions",
            "Self-play positions written to replay shards",
            tag_keys=("collector",),
        )
        self._batch = metrics.Gauge(
            "chessrl_selfplay_batch_size",
            "Leaves per network call (mean of the last move)",
            tag_keys=("collector",),
        )
        for metric in (self._games, self._positions, self._batch):
            metric.set_default_tags(tags)

    def _hand_over(self, note: dict[str, Any], server: Any) -> bool:
        """Put a shard's note on the learner's queue, waiting while it is full (backpressure);
        False when the run was stopped meanwhile."""
        from ray.util.queue import Full

        while True:
            try:
                self.queue.put(note, block=True, timeout=1.0)
                return True
            except Full:
                stopped, _ = ray.get(server.poll.remote(1 << 62))
                if stopped:
                    return False

    def run(self, max_games: int | None = None) -> dict[str, Any]:
        """Play until the server says stop (or ``max_games`` games ended); returns counts. An
        exception is reported to the server first, so the learner does not wait for games."""
        try:
            return self._run(max_games)
        except Exception as exc:
            server = ray.get_actor(self.spec.server_name, namespace=self.spec.namespace)
            ray.get(server.report_failure.remote(f"collector {self.index}: {type(exc).__name__}: {exc}"))
            raise

    def _run(self, max_games: int | None) -> dict[str, Any]:
        import torch

        from chessrl.search.mcts import NetworkEvaluator
        from chessrl.search.network import PolicyValueNet
        from chessrl.search.replay import positions_table
        from chessrl.search.selfplay import SelfPlay

        spec = self.spec
        torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
        server = ray.get_actor(spec.server_name, namespace=spec.namespace)
        device = torch.device(spec.device if spec.device != "cuda" or torch.cuda.is_available() else "cpu")
        net = PolicyValueNet(spec.net).to(device).eval()
        version = -1
        seed = spec.seed * 1000 + self.index * 100 + self.lifetime_starts  # a restart plays new games
        play = SelfPlay(
            NetworkEvaluator(net),
            spec.mcts,
            spec.settings,
            seed=seed,
            game_prefix=f"c{self.index}-s{self.lifetime_starts}",
            network_version=version,
        )
        pending: list[Any] = []  # tables of finished games' positions, not yet in a shard
        games = written = 0
        finished_since: list[Any] = []
        self._write_status(state="running")
        started = time.perf_counter()
        while True:
            stopped, newer = ray.get(server.poll.remote(version))
            if stopped or (max_games is not None and games >= max_games):
                break
            if newer is not None:
                version = self._load_weights(net, play, newer)
            if version < 0:  # nothing published yet
                time.sleep(0.05)
                continue
            finished = self._step(play)
            if not finished:
                continue
            games += len(finished)
            self._games.inc(len(finished))
            finished_since += finished
            pending.append(positions_table(finished))
            written += self._write_shards(pending, finished_since, version, server)
        seconds = time.perf_counter() - started
        self._write_status(state="stopped")
        return {
            "collector": self.index,
            "games": games,
            "positions_written": written,
            "moves": play.moves_played,
            "simulations": play.search.simulations_run,
            "seconds": seconds,
            "starts": self.starts,
        }

    @staticmethod
    def _load_weights(net: Any, play: Any, newer: Any) -> int:
        """Load the server's newer weights (``(version, [ref])``) into ``net`` and play on with
        them; their version."""
        import torch

        from chessrl.search.mcts import NetworkEvaluator

        version, [ref] = newer
        net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ray.get(ref).items()})
        net.eval()
        play.set_evaluator(NetworkEvaluator(net), version)
        return version

    def _step(self, play: Any) -> list[Any]:
        """One move of every game in flight (the batch gauge set from its network calls); the
        games it finished."""
        calls, positions = play.search.evaluator_calls, play.search.positions_evaluated
        finished = play.step()
        if play.search.evaluator_calls > calls:
            self._batch.set(
                (play.search.positions_evaluated - positions) / (play.search.evaluator_calls - calls)
            )
        return finished

    def _write_shards(self, pending: list[Any], finished_since: list[Any], version: int, server: Any) -> int:
        """Write every full shard of ``pending`` (finished positions' tables, in order; what is short
        of a shard stays in it) and hand each one's note, with the games of ``finished_since`` (then
        emptied), to the learner; the rows written. Stops early when the run was stopped."""
        from chessrl.search.replay import shard_path, write_shard

        spec = self.spec
        written = 0
        while sum(table.num_rows for table in pending) >= spec.shard_positions:
            whole = pa.concat_tables(pending)
            shard, rest = whole.slice(0, spec.shard_positions), whole.slice(spec.shard_positions)
            rel = shard_path(version, self.index, self.next_shard)
            rows = write_shard(self.replay, rel, shard)
            self.next_shard += 1
            written += rows
            pending[:] = [rest] if rest.num_rows else []
            self._positions.inc(rows)
            self._write_status(state="running", last_shard=rel)
            note = {
                "shard": rel,
                "rows": rows,
                "version": version,
                "collector": self.index,
                "results": [g.result for g in finished_since],
                "terminations": [g.termination for g in finished_since],
                "plies": [len(g.moves) for g in finished_since],
            }
            finished_since.clear()
            if not self._hand_over(note, server):
                break
        return written
