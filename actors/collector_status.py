"""The status file every collector actor keeps (self-play and rollout collectors):
``collector-NN.json`` in the run's status folder, with its pid, its starts in this invocation and
over the run's life, and the next shard it will write; read back when Ray restarts it, so the
count of starts goes on and no shard is written twice."""

from __future__ import annotations

import json
import os
from typing import Any


class CollectorStatus:
    """A mixin for a collector actor with ``status`` (a Storage), ``index``, ``spec.invocation``,
    ``starts``, ``lifetime_starts`` and ``next_shard``."""

    status: Any
    index: int
    spec: Any
    starts: int
    lifetime_starts: int
    next_shard: int

    def _read_status(self) -> dict[str, Any]:
        """The status file as last written ({} when there is none)."""
        name = f"collector-{self.index:02d}.json"
        return json.loads(self.status.read_text(name)) if self.status.exists(name) else {}

    def _write_status(self, **fields: Any) -> None:
        """Write the status file: who this collector is, its starts and next shard, and ``fields``."""
        record = {
            "index": self.index,
            "pid": os.getpid(),
            "invocation": self.spec.invocation,
            "starts": self.starts,
            "lifetime_starts": self.lifetime_starts,
            "next_shard": self.next_shard,
        }
        record.update(fields)
        self.status.write_text(f"collector-{self.index:02d}.json", json.dumps(record))
