"""``rlaif`` for real (Ray, Stockfish, tiny models, every phase at its smallest): the driver killed
with SIGKILL during ``reward``, then the same command: the phases that had finished are skipped
(manifests and outputs untouched), reward resumes from its checkpoint, and the rest of the graph
runs to the head-to-head evaluate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

MICRO = {
    "run": {"name": "m", "seed": 7},
    "ray": {"num_cpus": 2, "object_store_gb": 1},
    "tracking": {"enabled": False},
    "prepare": {"generate": 0, "min_plies": 10, "max_games": 400},
    "sft": {"model": "tiny", "max_steps": 12, "batch_size": 8, "max_length": 128, "warmup_steps": 2,
            "eval_every": 12, "heldout_positions": 10, "torch_compile": "never"},
    "preferences": {"positions": 24, "heldout_positions": 8, "k": 2, "nodes": 300, "shard_positions": 8,
                    "max_invalid_share": 1.0},
    "reward": {"max_steps": 16, "batch_size": 4, "eval_every": 4, "heldout_pairs": 20, "spearman_positions": 3,
               "spearman_nodes": 200},
    "ppo": {"iterations": 2, "episodes_per_iteration": 8, "concurrent_games": 8, "max_actions": 4,
            "critic_warmup": 1, "minibatch": 32, "ppo_epochs": 1, "max_start_ply": 10, "opponents": ["random"],
            "time_limit_minutes": None},
    "grpo": {"text_format": "moves", "policy_share": 1.0, "iterations": 2, "prompts_per_iteration": 4,
             "group_size": 4, "stockfish_nodes": 200, "heldout_positions": 8, "time_limit_minutes": None},
    "evaluate": {"ladder": False, "suites": [], "quality_nodes": 0, "max_plies": 40, "random_plies": 4},
    "rlaif": {"compare_games": 2},
}  # fmt: skip


def test_rlaif_killed_during_reward_resumes_and_skips_what_finished(
    tmp_path, pgn_dir, registered_checkpoints
):
    config = {
        **MICRO,
        "prepare": {**MICRO["prepare"], "inputs": [str(pgn_dir / "masters" / "Firouzja.pgn.zst")]},
    }
    (tmp_path / "micro.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "pipelines.rlaif", "--config", str(tmp_path / "micro.yaml"),
               "--storage", str(tmp_path / "runs")]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    run = tmp_path / "runs" / "m"
    manifests = run / "rlaif" / "manifests"
    first_log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=first_log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and proc.poll() is None:
            if registered_checkpoints(run / "reward"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        first_log.close()
    finished = {
        p.stem: p.read_bytes() for p in manifests.glob("*.json") if not p.name.endswith(".started.json")
    }
    assert (manifests / "reward.started.json").exists()  # reward had started: the rerun resumes it
    assert set(finished) == {"prepare", "sft", "preferences"}, (tmp_path / "first.log").read_text()[-3000:]
    sft_model = (run / "sft" / "model" / "model.safetensors").read_bytes()

    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    graph = json.loads((run / "rlaif" / "graph.json").read_text())
    states = {n["node"]: n["state"] for n in graph["nodes"]}
    assert states == {"prepare": "skipped", "sft": "skipped", "preferences": "skipped", "reward": "done",
                      "ppo": "done", "grpo": "done", "evaluate": "done"}  # fmt: skip
    assert all((manifests / f"{n}.json").read_bytes() == b for n, b in finished.items())
    assert (run / "sft" / "model" / "model.safetensors").read_bytes() == sft_model
    assert "[reward] resuming from the checkpoint of step" in out
    for name in ("reward", "ppo", "grpo"):
        assert (run / name / "model" / "config.json").exists(), name
    assert json.loads((run / "grpo" / "model" / "config.json").read_text())["chessrl_text_format"] == "moves"
    results = json.loads((run / "evaluate" / "eval" / "results.json").read_text())
    ppo, grpo = f"lm:{run / 'ppo' / 'model'}", f"lm:{run / 'grpo' / 'model'}"
    assert results["players"] == [ppo, grpo, "sft", "random"]
    assert results["games"] == 6 * 2  # a round robin of 4 players, 2 games a pairing
    assert "evaluate summary" in rerun.stdout and "rlaif: graph state" in rerun.stdout
    assert "```mermaid" in (run / "rlaif" / "graph.md").read_text()


def test_rlaif_bad_input_is_one_line_before_any_work(tmp_path, capsys):
    from pipelines import rlaif
    from pipelines.phase import EXIT_USER_ERROR

    common = ["--storage", str(tmp_path), "--run-name", "bad", "--no-tracking"]
    cases = [
        (["--only", "dpo"], "rlaif.only"),
        (["--from", "nowhere"], "--from"),
        (["--force", "sft", "x"], "rlaif.force"),
        (["--compare-games", "1"], "rlaif.compare_games"),
        # a moves-format grpo starts from the plain sft: the graph has no rookworld sft to run
        (
            ["--only", "sft-rookworld", "--set", "grpo.text_format=moves", "--set", "grpo.policy_share=1"],
            "unknown phase 'sft-rookworld'",
        ),
    ]
    for args, expected in cases:
        assert rlaif.main(["--config", "tiny", *common, *args]) == EXIT_USER_ERROR
        err = capsys.readouterr().err.strip().splitlines()
        errors = [line for line in err if line.startswith("error: ")]
        assert errors == [err[-1]] and expected in err[-1] and "Traceback" not in "".join(err), err
    assert not (tmp_path / "bad").exists()  # nothing written, no Ray started
