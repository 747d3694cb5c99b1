"""The automatic batch size's pure parts: a probe step on a tiny model, the pick under a memory
share, the logged table, and the cache file (keyed by model, device and length; a corrupt file
starts afresh)."""

from __future__ import annotations

import json

from chessrl.lm.batch_size import (
    ProbeResult,
    cache_key,
    format_table,
    pick_batch_size,
    probe,
    read_cache,
    write_cache,
)
from chessrl.lm.models import build_model


def test_probe_runs_steps_and_reports_peak():
    model, _ = build_model("tiny")
    got = probe(model, 2, 16, steps=2)
    assert got.error is None and got.batch_size == 2
    assert got.peak_bytes > 50e6 and got.step_s > 0


def test_pick_takes_the_largest_that_fits_and_skips_failures():
    table = [
        ProbeResult(1, 100, 0.1),
        ProbeResult(2, 200, 0.1),
        ProbeResult(4, float("inf"), 0.0, "out of memory"),
    ]
    assert pick_batch_size(table, memory_bytes=1000, share=0.5) == 2
    assert pick_batch_size(table, memory_bytes=1000, share=0.05) is None
    text = format_table(table, 1000, 0.5)
    assert "<- picked" in text.splitlines()[2] and "failed: out of memory" in text


def test_cache_round_trip_and_keys(tmp_path):
    path = tmp_path / "cache" / "batch_sizes.json"
    key = cache_key("preset:tiny", "cpu:x:2", 256)
    assert key != cache_key("preset:tiny", "cpu:x:2", 512) != cache_key("preset:small", "cpu:x:2", 256)
    assert read_cache(path, key) is None
    write_cache(path, key, {"batch_size": 32})
    write_cache(path, "other", {"batch_size": 8})
    assert read_cache(path, key) == {"batch_size": 32}
    assert set(json.loads(path.read_text())) == {key, "other"}
    path.write_text("{not json")
    assert read_cache(path, key) is None
    write_cache(path, key, {"batch_size": 16})
    assert read_cache(path, key) == {"batch_size": 16}
