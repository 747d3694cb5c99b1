"""Replay shards of self-play positions: one Parquet schema, written whole, read as arrays. Ray-free.

A shard is a Parquet file of ``REPLAY_SCHEMA`` rows, written through
:meth:`cluster.storage.Storage.atomic_output` (a temporary name, then a rename; on S3 one
upload), so a reader never sees half a shard. Shards live at
``<run>/selfplay/replay/<network_version>/shard-<collector>-<n>.parquet``.

>>> import tempfile
>>> from cluster.storage import Storage
>>> from chessrl.search.mcts import MCTSConfig, UniformEvaluator
>>> from chessrl.search.selfplay import SelfPlay, SelfPlaySettings
>>> games = SelfPlay(UniformEvaluator(), MCTSConfig(simulations=2),
...                  SelfPlaySettings(concurrent_games=2, max_plies=4, history=1)).play(2)
>>> store = Storage.from_uri(tempfile.mkdtemp())
>>> rows = positions_table(games)
>>> rel = shard_path(network_version=0, collector=1, n=0)
>>> rel
'0/shard-01-000000.parquet'
>>> write_shard(store, rel, rows)
8
>>> batch = read_shards(store, [rel])
>>> batch.planes.shape, batch.policy.shape, batch.value.tolist()[:4]
((8, 21, 8, 8), (8, 4672), [0.0, 0.0, 0.0, 0.0])
>>> [p for p in list_shards(store)]
['0/shard-01-000000.parquet']
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chessrl.search.board_encoding import NUM_ACTIONS
from chessrl.search.selfplay import FinishedGame
from cluster.storage import Storage

__all__ = [
    "REPLAY_SCHEMA",
    "TRAINING_COLUMNS",
    "ReplayBatch",
    "decode_rows",
    "list_shards",
    "newest_shards",
    "positions_table",
    "read_shards",
    "shard_path",
    "write_shard",
]

#: One row per position. ``planes`` holds the ``(C, 8, 8)`` input planes as float16 bytes
#: (C is in the schema metadata as ``planes_channels``); the policy target is sparse.
REPLAY_SCHEMA = pa.schema(
    [
        pa.field("planes", pa.binary()),
        pa.field("policy_indices", pa.list_(pa.int32())),
        pa.field("policy_probs", pa.list_(pa.float32())),
        pa.field("value", pa.float32()),
        pa.field("game_id", pa.string()),
        pa.field("ply", pa.int32()),
        pa.field("network_version", pa.int32()),
    ]
)

#: The columns :func:`decode_rows` needs: what a learner reads from a shard.
TRAINING_COLUMNS = ["planes", "policy_indices", "policy_probs", "value"]

_SHARD = re.compile(r"^(\d+)/shard-(\d+)-(\d+)\.parquet$")
#: A shard's temporary file while it is written (``cluster.storage.Storage.atomic_output``).
_PARTIAL = re.compile(r"^\d+/\.shard-(\d+)-\d+\.parquet\..*\.tmp$")


def shard_path(network_version: int, collector: int, n: int) -> str:
    """Where a collector's ``n``-th shard of positions from ``network_version`` goes, relative to
    the replay folder."""
    return f"{network_version}/shard-{collector:02d}-{n:06d}.parquet"


def positions_table(games: Sequence[FinishedGame]) -> pa.Table:
    """The replay rows of finished games, in ``REPLAY_SCHEMA``."""
    planes, indices, probs, values, ids, plies, versions = [], [], [], [], [], [], []
    channels = 0
    for game in games:
        for pos in game.positions:
            channels = pos.planes.shape[0]
            planes.append(np.ascontiguousarray(pos.planes, dtype=np.float16).tobytes())
            indices.append(pos.policy_indices.astype(np.int32))
            probs.append(pos.policy_probs.astype(np.float32))
            values.append(pos.value)
            ids.append(game.game_id)
            plies.append(pos.ply)
            versions.append(pos.network_version)
    table = pa.table(
        [
            pa.array(planes, pa.binary()),
            pa.array(indices, pa.list_(pa.int32())),
            pa.array(probs, pa.list_(pa.float32())),
            pa.array(values, pa.float32()),
            pa.array(ids, pa.string()),
            pa.array(plies, pa.int32()),
            pa.array(versions, pa.int32()),
        ],
        schema=REPLAY_SCHEMA,
    )
    return table.replace_schema_metadata({"planes_channels": str(channels)})


def write_shard(storage: Storage, rel: str, table: pa.Table) -> int:
    """Write ``table`` whole to ``rel`` under ``storage`` (a :class:`cluster.storage.Storage`);
    returns its rows."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    storage.write_bytes(rel, buffer.getvalue())
    return table.num_rows


def shard_age(rel: str) -> tuple[int, int, int]:
    """A finished shard's place in time: its network version, then its number (collectors number
    their shards as they write them, side by side), then its collector.

    >>> sorted(["1/shard-01-000000.parquet", "0/shard-00-000003.parquet", "1/shard-00-000001.parquet"], key=shard_age)
    ['0/shard-00-000003.parquet', '1/shard-01-000000.parquet', '1/shard-00-000001.parquet']
    """
    match = _SHARD.match(rel)
    if match is None:
        raise ValueError(f"{rel!r} is not a replay shard's name (<version>/shard-<collector>-<n>.parquet)")
    version, collector, n = (int(g) for g in match.groups())
    return version, n, collector


def list_shards(storage: Storage) -> list[str]:
    """Finished shards under the replay folder, oldest first (by network version, then name);
    temporary files of writes in progress are not listed."""
    if not storage.exists():
        return []
    found = [rel for rel in storage.list_files() if _SHARD.match(rel)]
    return sorted(found, key=lambda rel: (int(rel.split("/")[0]), rel))


def remove_partial_shards(storage: Storage, collector: int) -> int:
    """Delete what ``collector``'s unfinished writes left under the replay folder (the temporary
    file of a shard its killed process was writing), so that a restarted collector starts clean;
    returns how many files went.

    >>> import tempfile
    >>> store = Storage.from_uri(tempfile.mkdtemp())
    >>> store.write_text("0/.shard-01-000002.parquet.x1y2.tmp", "half")
    >>> store.write_text("0/.shard-02-000000.parquet.a3b4.tmp", "another collector's")
    >>> remove_partial_shards(store, 1), [rel.split("/")[1][:16] for rel in store.list_files()]
    (1, ['.shard-02-000000'])
    """
    if not storage.exists():
        return 0
    partial = [
        rel for rel in storage.list_files() if (m := _PARTIAL.match(rel)) and int(m.group(1)) == collector
    ]
    for rel in partial:
        storage.delete(rel)
    return len(partial)


def newest_shards(window: Sequence[tuple[str, int]], positions: int) -> list[str]:
    """The newest shards of ``window`` (``(shard, rows)``, oldest first) holding about
    ``positions`` rows: a learner's sliding window, newest first.

    >>> newest_shards([("a", 32), ("b", 32), ("c", 32)], 40)
    ['c', 'b']
    """
    picked, rows = [], 0
    for rel, n in reversed(window):
        if rows >= positions:
            break
        picked.append(rel)
        rows += n
    return picked


@dataclass
class ReplayBatch:
    """Decoded rows: planes ``(N, C, 8, 8)`` float32, dense policy ``(N, 4672)`` float32, value ``(N,)``."""

    planes: np.ndarray
    policy: np.ndarray
    value: np.ndarray


def decode_rows(
    planes: Sequence[bytes],
    policy_indices: Sequence[Sequence[int]],
    policy_probs: Sequence[Sequence[float]],
    value: Sequence[float],
    channels: int,
) -> ReplayBatch:
    """Replay columns (as lists or arrays) -> dense arrays a network trains on."""
    n = len(planes)
    out = np.empty((n, channels, 8, 8), dtype=np.float32)
    policy = np.zeros((n, NUM_ACTIONS), dtype=np.float32)
    for i in range(n):
        out[i] = np.frombuffer(planes[i], dtype=np.float16).reshape(channels, 8, 8)
        idx = np.asarray(policy_indices[i], dtype=np.int64)
        if len(idx):
            policy[i, idx] = np.asarray(policy_probs[i], dtype=np.float32)
    return ReplayBatch(out, policy, np.array(value, dtype=np.float32))  # a writable copy


def read_shards(storage: Storage, rels: Sequence[str]) -> ReplayBatch:
    """Read and decode whole shards (a plain reader for tests and tools; the learner streams
    them through Ray Data)."""
    tables = [pq.read_table(io.BytesIO(storage.read_bytes(rel))) for rel in rels]
    table = pa.concat_tables(tables)
    channels = int((tables[0].schema.metadata or {}).get(b"planes_channels", b"0"))
    return decode_rows(
        table["planes"].to_pylist(),
        table["policy_indices"].to_pylist(),
        table["policy_probs"].to_pylist(),
        table["value"].to_pylist(),
        channels,
    )
