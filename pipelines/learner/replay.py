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

import abc
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


class ShardFeed(abc.ABC):
    """Rollout shards handed to the learner by a background thread, so that reading overlaps
    training and the learner waits with a timeout (a time limit, a collector's failure):
    :meth:`take` returns what arrived since the last call; an error of the thread is raised by
    the next :meth:`take`. ``read``: shards already consumed (a resumed run's), skipped. Each feed
    says where its shards come from in :meth:`_shards`."""

    #: What a thread's error is called when :meth:`take` raises it.
    failure = "reading rollout shards failed"

    def __init__(self, read: Sequence[str] = ()) -> None:
        self._seen = set(read)
        self._ready: list[tuple[list[str], list[dict[str, Any]]]] = []
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def start(self) -> Any:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to stop and wait for it (at most 30 s)."""
        self._stopping.set()
        self._thread.join(timeout=30)

    @abc.abstractmethod
    def _shards(self) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
        """New shards (names not in ``self._seen``) and their rows, as they arrive."""

    def _run(self) -> None:
        try:
            for names, rows in self._shards():
                self._seen |= set(names)
                with self._cond:
                    self._ready.append((names, rows))
                    self._cond.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to the learner's thread by take()
            with self._cond:
                self._error = error
                self._cond.notify_all()

    def take(self, timeout: float) -> list[tuple[list[str], list[dict[str, Any]]]]:
        """The shards that arrived since the last call, waiting up to ``timeout`` seconds for one."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._error is not None, timeout=timeout)
            if self._error is not None:
                raise RuntimeError(f"{self.failure}: {self._error}") from self._error
            ready, self._ready = self._ready, []
        return ready


class StreamFeed(ShardFeed):
    """This worker's split of the replay stream (a Ray Data ``DataIterator``), whole shards as
    Ray Data hands them. :meth:`stop` does not wait: the thread ends with the stream
    (:data:`DONE`) or the worker."""

    failure = "the rollout stream failed"

    def __init__(self, split: Any, read: Sequence[str] = ()) -> None:
        super().__init__(read)
        self.split = split

    def stop(self) -> None:
        self._stopping.set()

    def _shards(self) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        for table in self.split.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
            names, rows = [], []
            for name, data in zip(table.column("shard").to_pylist(), table.column("data").to_pylist(), strict=True):
                if name not in self._seen and name not in names:
                    names.append(name)
                    rows += pq.read_table(pa.BufferReader(data)).to_pylist()
            if names:
                yield names, rows


class RolloutFeed(ShardFeed):
    """The lead worker's pyarrow reads of new rollout shards (``ppo.rollout_reader: arrow``), each
    whole from the storage's filesystem (local or S3), a few milliseconds a shard; the lead hands
    each iteration's episodes to the other workers. (A ``ray.data.read_parquet`` a shard, tried
    before, cost about 1.2 s of wall time and 2 CPU-seconds however small, with Ray 2.60:
    :func:`rollout_stream` is one long read for the whole run instead.)

        feed = RolloutFeed(phase.child("rollouts"), read=state["read"]).start()
        for names, rows in feed.take(timeout=0.5):   # every shard read since the last take
            ...                                      # rows: the shards' rows as dicts
        feed.stop()

    A shard is listed once it is whole (:func:`chessrl.rl.ppo_types.list_rollout_shards`).
    """

    def __init__(self, storage: Storage, read: Sequence[str] = (), poll_s: float = 0.5) -> None:
        super().__init__(read)
        self.storage = storage
        self.poll_s = poll_s

    def _shards(self) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
        import pyarrow.parquet as pq

        from chessrl.rl.ppo_types import list_rollout_shards

        while not self._stopping.is_set():
            new = [rel for rel in list_rollout_shards(self.storage) if rel not in self._seen]
            if not new:
                self._stopping.wait(self.poll_s)  # a listing per poll: cheap locally, a request on S3
                continue
            fs = self.storage.fs
            yield new, [row for rel in new for row in pq.read_table(self.storage.path(rel), filesystem=fs).to_pylist()]
