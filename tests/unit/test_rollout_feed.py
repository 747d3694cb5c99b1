"""The ppo learner's feeds, without Ray: the arrow RolloutFeed and the replay stream's blocks
and StreamFeed. Shards are handed over once each, whole, in order, as they appear; shards already
read (a resumed run) are skipped; a bad shard is an error on the learner's side, not a silent gap."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.rl.ppo_types import rollout_shard_name
from cluster.storage import Storage
from pipelines.learner.replay import DONE, RolloutFeed, StreamFeed, shard_blocks


def put_shard(storage: Storage, n: int, rows: int) -> str:
    name = rollout_shard_name(0, n)
    buffer = io.BytesIO()
    pq.write_table(pa.table({"episode": [f"e{n}-{i}" for i in range(rows)], "t": list(range(rows))}), buffer)
    storage.write_bytes(name, buffer.getvalue())
    return name


def take_all(feed: RolloutFeed, want: int, timeout: float = 10.0) -> list[tuple[list[str], list[dict]]]:
    got: list[tuple[list[str], list[dict]]] = []
    while sum(len(names) for names, _ in got) < want:
        ready = feed.take(timeout=timeout)
        assert ready, "the feed handed nothing over in time"
        got += ready
    return got


def test_feed_hands_each_shard_once(tmp_path):
    storage = Storage.from_uri(str(tmp_path / "rollouts"))
    first = [put_shard(storage, 0, 3), put_shard(storage, 1, 2)]
    feed = RolloutFeed(storage, poll_s=0.05).start()
    try:
        got = take_all(feed, 2)
        assert [n for names, _ in got for n in names] == first
        assert sum(len(rows) for _, rows in got) == 5
        storage.write_text("shard-00-000002.parquet.tmp-123", "partial")  # a write in progress
        later = put_shard(storage, 3, 1)
        got = take_all(feed, 1)
        assert [n for names, _ in got for n in names] == [later]
        assert got[0][1] == [{"episode": "e3-0", "t": 0}]
        assert feed.take(timeout=0.2) == []
    finally:
        feed.stop()


def test_feed_skips_shards_already_read(tmp_path):
    storage = Storage.from_uri(str(tmp_path / "rollouts"))
    done = put_shard(storage, 0, 2)
    new = put_shard(storage, 1, 2)
    feed = RolloutFeed(storage, read=[done], poll_s=0.05).start()
    try:
        assert [n for names, _ in take_all(feed, 1) for n in names] == [new]
    finally:
        feed.stop()


def test_feed_error_reaches_the_learner(tmp_path):
    storage = Storage.from_uri(str(tmp_path / "rollouts"))
    storage.write_bytes(rollout_shard_name(0, 0), b"not parquet")
    feed = RolloutFeed(storage, poll_s=0.05).start()
    try:
        with pytest.raises(RuntimeError, match="reading rollout shards failed"):
            for _ in range(50):
                feed.take(timeout=0.2)
    finally:
        feed.stop()


class OneSplit:
    """A worker's split of the replay stream as Ray Data hands it (``iter_batches`` of pyarrow
    tables, one a block), from the stream's own blocks: no Ray needed."""

    def __init__(self, blocks):
        self.blocks = blocks

    def iter_batches(self, batch_size, batch_format, prefetch_batches):
        assert batch_size is None and batch_format == "pyarrow"  # whole blocks: whole shards
        yield from self.blocks


def test_stream_blocks_are_whole_shards_as_they_land_until_done(tmp_path):
    storage = Storage.from_uri(str(tmp_path / "rollouts"))
    first = put_shard(storage, 0, 3)
    storage.write_text("shard-00-000001.parquet.tmp-9", "partial")  # a write in progress
    blocks = shard_blocks(storage, poll_s=0.01)
    table = next(blocks)
    assert table.num_rows == 1 and table.column("shard").to_pylist() == [first]
    later = put_shard(storage, 2, 2)
    assert next(blocks).column("shard").to_pylist() == [later]
    storage.write_text(DONE, "")
    assert list(blocks) == []  # the stream ends once the learner is done
    # a resumed stream skips nothing itself (the workers skip what they read): every shard again
    assert [t.column("shard")[0].as_py() for t in shard_blocks(storage, 0.01)] == [first, later]


def test_stream_feed_hands_its_shards_rows_and_skips_those_read(tmp_path):
    storage = Storage.from_uri(str(tmp_path / "rollouts"))
    names = [put_shard(storage, n, 2) for n in range(3)]
    storage.write_text(DONE, "")
    feed = StreamFeed(OneSplit(list(shard_blocks(storage, 0.01))), read=names[:1]).start()
    got = take_all(feed, 2)
    assert [n for shards, _ in got for n in shards] == names[1:]
    assert [r["episode"] for _, rows in got for r in rows] == ["e1-0", "e1-1", "e2-0", "e2-1"]
    assert feed.take(timeout=0.1) == []


def test_stream_feed_error_reaches_the_learner():
    feed = StreamFeed(
        OneSplit([pa.table({"shard": ["shard-00-000000.parquet"], "data": [b"not parquet"]})])
    ).start()
    with pytest.raises(RuntimeError, match="the rollout stream failed"):
        for _ in range(50):
            feed.take(timeout=0.2)
