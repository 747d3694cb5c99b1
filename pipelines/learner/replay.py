"""How the ppo learner reads the rollout shards its collectors write, as they land:

- :class:`RolloutFeed` (``ppo.rollout_reader: arrow``, the default): the lead worker reads new
  shards with pyarrow and hands each iteration's episodes to the other workers.
- The replay stream through Ray Data (``stream``): :func:`rollout_stream`, one long-running read
  task that yields each new shard as one block until the lead writes :data:`DONE`, split across
  the Ray Train workers (:func:`stream_split_config`); each worker's :class:`StreamFeed` hands it
  the shards it was given, so each learns on its own episodes: no rank-0 read, no broadcast.

On the driver, with ``stream``::

    trainer = torch_trainer(..., datasets={"rollouts": rollout_stream(phase.child("rollouts"))},
                            dataset_config=stream_split_config())

In each worker (either feed)::

    feed = StreamFeed(ray.train.get_dataset_shard("rollouts"), read=state["read"]).start()
    for names, rows in feed.take(timeout=0.5):   # the shards handed over since the last take
        ...
    feed.stop()

A block is one shard, whole (its Parquet bytes: whole episodes, as GAE needs them). Ray Train's
default split (``equal=True``) may cut a block between workers and waits to balance rows, which
an unbounded stream cannot have: :func:`stream_split_config` splits with ``equal=False``, whole
blocks to whichever worker asks next. Ray Data buffers a read task's output into blocks of
``target_max_block_size``: the stream sets it to one byte, so each shard goes on as it is read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from cluster.storage import Storage

#: Written into the rollouts folder by the lead when training ends: the stream's read task stops.
DONE = "_stream_done"

#: The dataset's name in Ray Train's ``datasets`` (and ``get_dataset_shard``).
DATASET = "rollouts"


def shard_blocks(storage: Storage, poll_s: float, seen: Sequence[str] = ()) -> Iterator[Any]:
    """Each new finished shard under ``storage`` as a pyarrow table with a ``shard`` column (its
    name), in the order they land, until :data:`DONE` appears there (checked when nothing is new)."""
    import pyarrow as pa

    from chessrl.rl.ppo_types import list_rollout_shards

    done = set(seen)
    while True:
        new = [rel for rel in list_rollout_shards(storage) if rel not in done]
        if not new:
            if storage.exists(DONE):
                return
            time.sleep(poll_s)
            continue
        for rel in new:
            done.add(rel)
            yield pa.table({"shard": [rel], "data": pa.array([storage.read_bytes(rel)], pa.binary())})


def rollout_stream(storage: Storage, poll_s: float = 0.5) -> Any:
    """The Ray Data dataset of ``storage``'s rollout shards as they land (unbounded until
    :data:`DONE`): one read task, no CPU of its own (it mostly sleeps), one block a shard."""
    import ray.data
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    uri = storage.uri

    class RolloutShards(Datasource):  # type: ignore[misc]
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, **_: Any) -> list[Any]:
            meta = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
            return [ReadTask(lambda: shard_blocks(Storage.from_uri(uri), poll_s), meta)]

        def get_name(self) -> str:
            return "RolloutShards"

    ds = ray.data.read_datasource(RolloutShards(), override_num_blocks=1, num_cpus=0)
    # a read task's output is buffered into blocks of this size: one byte makes each row (a
    # shard) a block of its own, handed on as soon as it is read
    ds.context.target_max_block_size = 1
    return ds


def stream_split_config() -> Any:
    """Ray Train's ``dataset_config``: :data:`DATASET` split with ``equal=False`` (whole blocks,
    so whole shards and whole episodes, to whichever worker asks next), any other dataset as Ray
    Train splits it."""
    from ray.train import DataConfig

    class StreamSplit(DataConfig):  # type: ignore[misc]
        def configure(
            self, datasets: dict[str, Any], world_size: int, worker_handles: Any, worker_node_ids: Any, **kw: Any
        ) -> list[dict[str, Any]]:
            rest = {name: ds for name, ds in datasets.items() if name != DATASET}
            output = super().configure(rest, world_size, worker_handles, worker_node_ids, **kw)
            if DATASET in datasets:
                ds = datasets[DATASET]
                ds.context.execution_options = self._resolve_execution_options(DATASET)
                for i, split in enumerate(ds.streaming_split(world_size, equal=False)):
                    output[i][DATASET] = split
            return output

    return StreamSplit()


def stream_datasets(reader: str, rollouts: Storage) -> dict[str, Any]:
    """:func:`pipelines.learner.torch_trainer`'s dataset arguments for ppo's ``rollout_reader``:
    for ``stream`` the replay stream of ``rollouts`` and its split, else none. A finished run's
    :data:`DONE` is removed first, so that a resumed run's stream goes on."""
    if rollouts.exists(DONE):
        rollouts.delete(DONE)
    if reader != "stream":
        return {}
    rollouts.makedirs()
    return {"datasets": {DATASET: rollout_stream(rollouts)}, "dataset_config": stream_split_config()}


class StreamFeed:
    """This worker's split of the stream, read by a background thread so the learner can wait
    with a timeout (a time limit, a collector's failure): the same ``start``/``take``/``stop`` as
    :class:`pipelines.learner.RolloutFeed`. ``read``: shards already consumed (a resumed run's),
    skipped. An error of the thread is raised by the next :meth:`take`."""

    def __init__(self, split: Any, read: Sequence[str] = ()) -> None:
        self.split = split
        self._seen = set(read)
        self._ready: list[tuple[list[str], list[dict[str, Any]]]] = []
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rollout-stream", daemon=True)

    def start(self) -> StreamFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Nothing to join: the thread ends with the stream (:data:`DONE`) or the worker."""

    def _run(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            for table in self.split.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
                names, rows = [], []
                for name, data in zip(table.column("shard").to_pylist(), table.column("data").to_pylist(), strict=True):
                    if name not in self._seen:
                        self._seen.add(name)
                        names.append(name)
                        rows += pq.read_table(pa.BufferReader(data)).to_pylist()
                if names:
                    with self._cond:
                        self._ready.append((names, rows))
                        self._cond.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to the learner's thread by take()
            with self._cond:
                self._error = error
                self._cond.notify_all()

    def take(self, timeout: float) -> list[tuple[list[str], list[dict[str, Any]]]]:
        """The shards handed to this worker since the last call, waiting up to ``timeout`` s for one."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._error is not None, timeout=timeout)
            if self._error is not None:
                raise RuntimeError(f"the rollout stream failed: {self._error}") from self._error
            ready, self._ready = self._ready, []
        return ready


class RolloutFeed:
    """Rollout shards read by a background thread, ahead of the learner, so that reading
    overlaps training on the previous batch.

    It reads each new shard whole with pyarrow from the storage's filesystem (local or S3), a
    few milliseconds a shard, in the lead worker only (``ppo.rollout_reader: arrow``); the
    lead hands each iteration's episodes to the other workers. (A ``ray.data.read_parquet`` a
    shard, tried before, cost about 1.2 s of wall time and 2 CPU-seconds however small, with
    Ray 2.60: :func:`rollout_stream` is one long read for the whole run instead.)

        feed = RolloutFeed(phase.child("rollouts"), read=state["read"]).start()
        for names, rows in feed.take(timeout=0.5):   # every shard read since the last take
            ...                                      # rows: the shards' rows as dicts
        feed.stop()

    ``read`` are shards (relative names) already consumed, e.g. by a run this one resumes; a
    shard is listed once it is whole (:func:`chessrl.rl.ppo_types.list_rollout_shards`). An error of
    the thread is raised by the next :meth:`take`.
    """

    def __init__(self, storage: Storage, read: Sequence[str] = (), poll_s: float = 0.5) -> None:
        self.storage = storage
        self.poll_s = poll_s
        self._seen = set(read)
        self._ready: list[tuple[list[str], list[dict[str, Any]]]] = []
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollout-feed", daemon=True)

    def start(self) -> RolloutFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)

    def _read(self, names: list[str]) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        paths = [self.storage.path(rel) for rel in names]
        return [row for path in paths for row in pq.read_table(path, filesystem=self.storage.fs).to_pylist()]

    def _run(self) -> None:
        from chessrl.rl.ppo_types import list_rollout_shards

        try:
            while not self._stopping.is_set():
                new = [rel for rel in list_rollout_shards(self.storage) if rel not in self._seen]
                if not new:
                    self._stopping.wait(self.poll_s)  # a listing per poll: cheap locally, a request on S3
                    continue
                rows = self._read(new)
                self._seen |= set(new)
                with self._cond:
                    self._ready.append((new, rows))
                    self._cond.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to the learner's thread by take()
            with self._cond:
                self._error = error
                self._cond.notify_all()

    def take(self, timeout: float) -> list[tuple[list[str], list[dict[str, Any]]]]:
        """The shards read since the last call, waiting up to ``timeout`` seconds for one."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._error is not None, timeout=timeout)
            if self._error is not None:
                raise RuntimeError(f"reading rollout shards failed: {self._error}") from self._error
            ready, self._ready = self._ready, []
        return ready
