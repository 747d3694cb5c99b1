"""``--batch-size auto`` with real Ray: each probe in a fresh worker process, the largest size
under the share picked and its table logged, and a second call answered from the cache."""

from __future__ import annotations

import json

from chessrl.lm.batch_size import read_cache
from pipelines.common.batch_size import auto_batch_size


def test_auto_batch_size_probes_then_uses_the_cache(tmp_path, local_ray):
    cache = tmp_path / "batch_sizes.json"
    said: list[str] = []
    size = auto_batch_size("preset:tiny", 32, log=said.append, share=1.0, cache_path=cache, sizes=(1, 2))
    assert size == 2
    table = "\n".join(said)
    assert "peak MB" in table and "<- picked" in table
    peaks = [float(line.split()[1]) for line in table.splitlines() if line.strip()[:1].isdigit()]
    assert len(peaks) == 2 and all(p > 50 for p in peaks)  # each probe's own peak, in MB
    [entry] = json.loads(cache.read_text()).values()
    assert entry["batch_size"] == 2 and len(entry["table"]) == 2

    said.clear()
    assert auto_batch_size("preset:tiny", 32, log=said.append, share=1.0, cache_path=cache, sizes=(1, 2)) == 2
    assert len(said) == 1 and "cached" in said[0]  # no probe ran

    # a share nothing fits under is one clear error
    tight: list[str] = []
    try:
        auto_batch_size(
            "preset:tiny", 32, log=tight.append, share=1e-6, cache_path=tmp_path / "other.json", sizes=(1,)
        )
    except Exception as exc:  # noqa: BLE001
        assert "--batch-size auto" in str(exc) and "one sequence" in str(exc)
    else:
        raise AssertionError("a budget nothing fits under did not fail")
    assert read_cache(tmp_path / "other.json", "x") is None
