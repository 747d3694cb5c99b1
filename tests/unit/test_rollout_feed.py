"""The learner's RolloutFeed (arrow reader, no Ray needed): shards are handed over once each, in
order, as they appear; shards already read (a resumed run) are skipped; a bad shard is an error
on the learner's side, not a silent gap."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actors.rollout import rollout_shard_name
from cluster.storage import Storage
from pipelines.learner import RolloutFeed


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


def test_unknown_reader_is_refused(tmp_path):
    with pytest.raises(ValueError, match="readers: arrow, ray_data"):
        RolloutFeed(Storage.from_uri(str(tmp_path)), reader="pandas")
