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
blocks, each to the split that has had the fewest rows (one row a shard: shards in turn). Ray
Data buffers a read task's output into blocks of ``target_max_block_size``: the stream sets it to
one byte, so each shard goes on as it is read.

selfplay's replay window through Ray Data (``selfplay.replay_reader: stream``): :func:`window_stream`,
one long read task that passes over the newest shards of the replay folder holding about
``window_positions`` positions, in a shuffled order, again and again (each pass lists the folder:
new shards join the window as they land, old ones leave it), until the lead writes :data:`DONE`.
It is split across the workers as above (:data:`WINDOW`), and each worker draws shuffled batches
from what it is handed (:func:`window_batches`)::

    batches = window_batches(ray.train.get_dataset_shard(WINDOW), batch_size=256, seed=0)
    batch = next(batches)    # {"planes": ..., "policy_indices": ..., ...} as numpy arrays
"""

from __future__ import annotations

import abc
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cluster.storage import Storage

#: Written into the rollouts folder by the lead when training ends: the stream's read task stops.
DONE = "_stream_done"

#: The dataset's name in Ray Train's ``datasets`` (and ``get_dataset_shard``): ppo's rollouts.
DATASET = "rollouts"

#: selfplay's replay window's name there.
WINDOW = "replay"


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


def newest_window(storage: Storage, positions: int, rows: dict[str, int]) -> list[str]:
    """The newest finished shards under ``storage`` holding about ``positions`` rows, newest first;
    ``rows`` caches each shard's row count (its Parquet footer, read only for the shards looked at)."""
    import pyarrow.parquet as pq

    from chessrl.search.replay import list_shards, shard_age

    picked, held = [], 0
    for rel in sorted(list_shards(storage), key=shard_age, reverse=True):
        if held >= positions:
            break
        if rel not in rows:
            rows[rel] = pq.read_metadata(storage.path(rel), filesystem=storage.fs).num_rows
        picked.append(rel)
        held += rows[rel]
    return picked


def window_blocks(
    storage: Storage,
    positions: int,
    seed: int,
    poll_s: float,
    columns: Sequence[str] | None = None,
    relist_every: int = 8,
) -> Iterator[Any]:
    """Endless shuffled passes over the replay window under ``storage`` (:func:`newest_window`),
    each shard as a one-row table (``shard``, ``data``: its ``columns`` as Arrow IPC bytes,
    uncompressed, so that the stream's object store budget counts what the rows weigh), until
    :data:`DONE` appears there. Every ``relist_every`` shards the folder is listed again: shards
    that landed since go next, so a new shard waits a few shards, not a pass of the window."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng, rows = random.Random(seed), {}
    while not storage.exists(DONE):
        queue = newest_window(storage, positions, rows)
        if not queue:
            time.sleep(poll_s)
            continue
        rng.shuffle(queue)
        this_pass, sent = set(queue), 0
        while queue:
            rel = queue.pop()
            table = pq.read_table(storage.path(rel), columns=columns, filesystem=storage.fs)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            yield pa.table({"shard": [rel], "data": pa.array([sink.getvalue().to_pybytes()], pa.binary())})
            sent += 1
            if sent % relist_every == 0:
                if storage.exists(DONE):
                    return
                landed = [r for r in newest_window(storage, positions, rows) if r not in this_pass]
                this_pass.update(landed)
                queue += landed  # popped from the end: next


def shard_stream(name: str, blocks: Callable[[], Iterator[Any]]) -> Any:
    """A Ray Data dataset of one long read task (``blocks()``: one-row tables, each a block of its
    own), with no CPU of its own: it mostly waits for shards."""
    import ray.data
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    class Shards(Datasource):  # type: ignore[misc]
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, **_: Any) -> list[Any]:
            meta = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
            return [ReadTask(blocks, meta)]

        def get_name(self) -> str:
            return name

    ds = ray.data.read_datasource(Shards(), override_num_blocks=1, num_cpus=0)
    # a read task's output is buffered into blocks of this size: one byte makes each row (a
    # shard) a block of its own, handed on as soon as it is read
    ds.context.target_max_block_size = 1
    # an endless stream's bars would redraw for the whole run, from the split's coordinator, over
    # the phase's own progress lines
    ds.context.enable_progress_bars = False
    return ds


def rollout_stream(storage: Storage, poll_s: float = 0.5) -> Any:
    """The Ray Data dataset of ``storage``'s rollout shards as they land (unbounded until
    :data:`DONE`): one read task, no CPU of its own (it mostly sleeps), one block a shard."""
    uri = storage.uri
    return shard_stream("RolloutShards", lambda: shard_blocks(Storage.from_uri(uri), poll_s))


def window_stream(
    storage: Storage,
    positions: int,
    seed: int,
    ahead_bytes: int,
    columns: Sequence[str] | None = None,
    poll_s: float = 0.5,
) -> Any:
    """The Ray Data dataset of passes over ``storage``'s replay window (:func:`window_blocks`),
    unbounded until :data:`DONE`. The read task runs at most about ``ahead_bytes`` of shards ahead
    of the learners (its object store budget: without one it would read pass after pass ahead and
    the learners would train on an old window)."""
    from ray.data import ExecutionResources

    uri = storage.uri
    ds = shard_stream(
        "ReplayWindow", lambda: window_blocks(Storage.from_uri(uri), positions, seed, poll_s, columns)
    )
    ds.context.execution_options.resource_limits = ExecutionResources(object_store_memory=ahead_bytes)
    return ds


def window_ahead_bytes(positions: int, channels: int) -> int:
    """How far :func:`window_stream` may read ahead: a quarter of a window of ``positions`` rows
    of ``channels`` float16 planes (and their policy targets), at least 4 MiB.

    >>> window_ahead_bytes(20000, 21) // 2**20
    14
    """
    return max(4 << 20, positions * (channels * 64 * 2 + 256) // 4)


def window_batches(
    split: Any, batch_size: int, seed: int, buffer_rows: int = 2048
) -> Iterator[dict[str, Any]]:
    """Endless numpy batches of ``batch_size`` rows from this worker's split of
    :func:`window_stream`: shards are decoded into a buffer of at least ``buffer_rows`` rows (and
    ``batch_size``), and each batch is drawn from it at random."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    pool: list[Any] = []
    held = 0
    for table in split.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=1):
        for data in table.column("data").to_pylist():
            shard = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
            pool.append(shard)
            held += shard.num_rows
        full = max(buffer_rows, batch_size)
        if held < full:
            continue
        # one shuffle of the buffer, then batches from it until half of it is left (at least one):
        # new shards mix into the half that stays
        merged = pa.concat_tables(pool).combine_chunks()
        order = rng.permutation(merged.num_rows)
        draws = max(1, (merged.num_rows - full // 2) // batch_size)
        for k in range(draws):
            batch = merged.take(order[k * batch_size : (k + 1) * batch_size])
            yield {name: batch.column(name).to_numpy(zero_copy_only=False) for name in batch.column_names}
        rest = merged.take(order[draws * batch_size :])
        pool, held = [rest], rest.num_rows


def stream_split_config() -> Any:
    """Ray Train's ``dataset_config``: :data:`DATASET` and :data:`WINDOW` split with ``equal=False``
    (whole blocks, so whole shards and whole episodes, each to the split that has had the fewest
    rows: one row a shard, so shards in turn), any other
    dataset as Ray Train splits it."""
    from ray.train import DataConfig

    class StreamSplit(DataConfig):  # type: ignore[misc]
        def configure(
            self,
            datasets: dict[str, Any],
            world_size: int,
            worker_handles: Any,
            worker_node_ids: Any,
            **kw: Any,
        ) -> list[dict[str, Any]]:
            rest = {name: ds for name, ds in datasets.items() if name not in (DATASET, WINDOW)}
            output = super().configure(rest, world_size, worker_handles, worker_node_ids, **kw)
            for name in (DATASET, WINDOW):
                if name in datasets:
                    ds = datasets[name]
                    limits = ds.context.execution_options.resource_limits  # the stream's own budget
                    ds.context.execution_options = self._resolve_execution_options(name)
                    ds.context.execution_options.resource_limits = limits
                    for i, split in enumerate(ds.streaming_split(world_size, equal=False)):
                        output[i][name] = split
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


def window_datasets(reader: str, replay: Storage, positions: int, seed: int, channels: int) -> dict[str, Any]:
    """:func:`pipelines.learner.torch_trainer`'s dataset arguments for selfplay's ``replay_reader``:
    for ``stream`` the replay window's stream (:func:`window_stream`) and its split, else none. A
    finished run's :data:`DONE` is removed first, so that a resumed run's stream goes on."""
    if replay.exists(DONE):
        replay.delete(DONE)
    if reader != "stream":
        return {}
    from chessrl.search.replay import TRAINING_COLUMNS

    replay.makedirs()
    return {
        "datasets": {
            WINDOW: window_stream(
                replay, positions, seed, window_ahead_bytes(positions, channels), columns=TRAINING_COLUMNS
            )
        },
        "dataset_config": stream_split_config(),
    }


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
            for name, data in zip(
                table.column("shard").to_pylist(), table.column("data").to_pylist(), strict=True
            ):
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
            yield (
                new,
                [
                    row
                    for rel in new
                    for row in pq.read_table(self.storage.path(rel), filesystem=fs).to_pylist()
                ],
            )
