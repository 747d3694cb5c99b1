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


def test_auto_probes_on_the_device_the_learner_trains_on(monkeypatch, tmp_path):
    """With use_gpu the probe task asks for a GPU and probes ``cuda`` (where it reads the GPU's
    free memory); without, the CPU as before. Ray's task is faked: no GPU, no cluster."""
    import ray

    from pipelines.common.batch_size import auto_batch_size, probe_resources

    asked: list[tuple[dict, tuple]] = []

    class Task:
        def options(self, **kw):
            self.kw = kw
            return self

        def remote(self, *args):
            asked.append((self.kw, args))
            return args

    monkeypatch.setattr(ray, "remote", lambda **_: lambda fn: Task())
    monkeypatch.setattr(
        ray,
        "get",
        lambda args: {"result": ProbeResult(args[1], 1e6, 0.1).__dict__, "device": args[3], "memory": 1e9},
    )
    for use_gpu, device in ((True, "cuda"), (False, "cpu")):
        asked.clear()
        got = auto_batch_size(
            "preset:tiny",
            8,
            log=lambda _: None,
            use_gpu=use_gpu,
            cpus=3.0,
            cache_path=tmp_path / f"{device}.json",
            sizes=(1, 2),
        )
        assert got == 2
        assert [kw for kw, _ in asked] == [probe_resources(use_gpu, 3.0)] * 2
        assert {args[3] for _, args in asked} == {device}
        assert asked[0][0]["num_gpus"] == (1 if use_gpu else 0)


def test_grpo_auto_batch_size_asks_for_the_learners_device(monkeypatch):
    """grpo's ``batch_size: auto`` passes its ``use_gpu`` on (it probed CPU memory before)."""
    import chessrl.lm.checkpoints
    import cluster.capacity
    import pipelines.common.batch_size
    import pipelines.grpo
    from pipelines.config.rl import GRPOConfig

    seen: dict = {}
    monkeypatch.setattr(pipelines.common.batch_size, "auto_batch_size", lambda *a, **kw: seen.update(kw) or 8)
    monkeypatch.setattr(cluster.capacity, "read_capacity", lambda: None)
    monkeypatch.setattr(pipelines.grpo, "grpo_cpus", lambda *a: (1.0, 4.0))
    monkeypatch.setattr(chessrl.lm.checkpoints, "load_tokenizer", lambda _: build_model("tiny")[1])

    class Context:
        log = staticmethod(lambda _: None)

    for use_gpu in (True, False):
        cfg = GRPOConfig(batch_size="auto", use_gpu=use_gpu)
        got = pipelines.grpo.learner_resources(Context(), cfg, "policy", [{"text": "e2e4"}], {"move": 4})
        assert got[2] == 8 and seen["use_gpu"] is use_gpu
