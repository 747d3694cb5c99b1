"""``ppo`` with real Ray, tiny models and the RewardServer: a short run whose shards and metrics
agree; a collector killed with SIGKILL and then the driver, and the same command resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import ppo

ROOT = Path(__file__).resolve().parents[2]

SMALL = ["--iterations", "3", "--episodes-per-iteration", "16", "--concurrent-games", "8", "--max-actions", "4",
         "--critic-warmup", "1", "--minibatch", "32", "--ppo-epochs", "1", "--max-start-ply", "10"]  # fmt: skip


@pytest.fixture(scope="module")
def reward_dir(tmp_path_factory, tiny_lm_dir) -> Path:
    """A tiny untrained reward model on the tiny policy's tokenizer."""
    from chessrl.models import load_tokenizer
    from chessrl.reward import build_reward_model

    folder = tmp_path_factory.mktemp("rm")
    model, tokenizer = build_reward_model("tiny", load_tokenizer(str(tiny_lm_dir)))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def shard_rows(phase: Path) -> list[dict]:
    rows = []
    for path in sorted((phase / "rollouts").glob("shard-*.parquet")):
        rows += [dict(r, shard=path.name) for r in pq.read_table(path).to_pylist()]
    return rows


def test_short_run_shards_and_metrics_agree(tmp_path, tiny_lm_dir, reward_dir, local_ray, capsys):
    code = ppo.main(
        ["--storage", str(tmp_path), "--run-name", "p", "--no-tracking", "--policy", str(tiny_lm_dir),
         "--reward-model", str(reward_dir), "--max-staleness", "1", *SMALL]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    phase = tmp_path / "p" / "ppo"
    summary = json.loads((phase / "summary.json").read_text())
    assert summary["iterations"] == 3 and summary["episodes"] >= 3 * 16
    learner = json.loads((phase / "learner_state.json").read_text())
    rows = shard_rows(phase)
    # every action once: (episode, t) unique over the shards; t runs 0..n-1 in each episode
    keys = [(r["episode"], r["t"]) for r in rows]
    assert len(keys) == len(set(keys))
    by_episode: dict[str, list[int]] = {}
    for r in rows:
        by_episode.setdefault(r["episode"], []).append(r["t"])
    assert all(sorted(ts) == list(range(len(ts))) for ts in by_episode.values())
    # an episode ends once: at an illegal move, the game's end or T; only its last action says so
    assert all(sum(r["last"] for r in rows if r["episode"] == e) == 1 for e in list(by_episode)[:50])
    assert all(r["last"] for r in rows if not r["legal"])
    # no sample comes from weights newer than the learner's, and none used was staler than the bound
    assert max(r["version"] for r in rows) <= learner["version"]
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2, 3]
    assert all(0 <= m["version_lag_max"] <= 1 for m in metrics)
    assert metrics[0]["critic_warmup"] == 1 and "clipfrac" in metrics[-1]
    assert sum(m["episodes"] for m in metrics) == summary["episodes"]
    assert len(learner["read"]) == len(set(learner["read"])) == summary["shards_read"]
    # the policy loads and plays through transformers alone
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(phase / "model")
    model = AutoModelForCausalLM.from_pretrained(phase / "model")
    ids = tokenizer("e2e4 e7e5", return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=1, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 1
    assert (phase / "curves.png").stat().st_size > 1000
    assert "ppo summary" in out.out and "sprt" in out.out


def test_collector_and_driver_killed_then_the_same_command_resumes(tmp_path, tiny_lm_dir, reward_dir):
    phase = tmp_path / "k" / "ppo"
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS")
    command = [
        sys.executable, "-m", "pipelines.ppo", "--storage", str(tmp_path), "--run-name", "k", "--no-tracking",
        "--num-cpus", "2", "--policy", str(tiny_lm_dir), "--reward-model", str(reward_dir),
        *SMALL[:1], "8", *SMALL[2:], "--checkpoint-interval", "2",
    ]  # fmt: skip
    assert command[command.index("--iterations") + 1] == "8"
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    status = phase / "collectors" / "collector-00.json"
    try:
        deadline = time.monotonic() + 300
        # kill the collector once it has written two shards
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list((phase / "rollouts").glob("shard-00-*.parquet"))) >= 2 and status.exists():
                break
            time.sleep(0.2)
        assert proc.poll() is None, "ppo ended before the collector could be killed"
        os.kill(json.loads(status.read_text())["pid"], signal.SIGKILL)
        # then the driver, once the learner has a checkpoint past iteration 2
        while time.monotonic() < deadline and proc.poll() is None:
            if list((phase / "ray").rglob("learner.pt")):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "ppo ended before the driver could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (phase / "summary.json").exists()
    record = json.loads(status.read_text())
    assert record["lifetime_starts"] >= 2, record  # Ray restarted the killed collector

    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    assert "learner resumes at iteration" in rerun.stdout + rerun.stderr
    summary = json.loads((phase / "summary.json").read_text())
    assert summary["iterations"] == 8
    rows = shard_rows(phase)
    keys = [(r["episode"], r["t"]) for r in rows]
    assert len(keys) == len(set(keys)), "an action was written twice"
    learner = json.loads((phase / "learner_state.json").read_text())
    assert len(learner["read"]) == len(set(learner["read"]))
    written = {p.name for p in (phase / "rollouts").glob("shard-*.parquet")}
    assert set(learner["read"]) <= written
    # what the learner never read is at most what a collector may play after its last read
    assert len(written - set(learner["read"])) <= 4
