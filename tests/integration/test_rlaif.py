"""``rlaif``'s smallest config (``MICRO``: every phase at its smallest; the system tier's
whole-graph run, killed on the embedded Ray and resumed as a job on two nodes, uses it), a Ray
Tune sweep for real, and the graph's bad input. (What a changed section re-runs:
``tests/unit/test_graph.py``.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

MICRO = {
    "run": {"name": "m", "seed": 7},
    "ray": {"num_cpus": 2, "object_store_gb": 1},
    "tracking": {"enabled": False},
    "prepare": {"generate": 0, "min_plies": 10, "max_games": 400, "shard_games": 2000},
    "sft": {
        "model": "tiny",
        "max_steps": 8,
        "batch_size": 8,
        "max_length": 128,
        "warmup_steps": 2,
        "eval_every": 8,
        "heldout_positions": 10,
        "torch_compile": "never",
    },
    "preferences": {
        "positions": 24,
        "heldout_positions": 8,
        "k": 2,
        "nodes": 300,
        "shard_positions": 8,
        "max_invalid_share": 1.0,
    },
    "reward": {
        "max_steps": 16,
        "batch_size": 4,
        "eval_every": 4,
        "heldout_pairs": 20,
        "spearman_positions": 3,
        "spearman_nodes": 200,
    },
    "ppo": {
        "iterations": 2,
        "episodes_per_iteration": 8,
        "concurrent_games": 8,
        "max_actions": 4,
        "critic_warmup": 1,
        "minibatch": 32,
        "ppo_epochs": 1,
        "max_start_ply": 10,
        "opponents": ["random"],
        "heldout_positions": 8,
        "time_limit_minutes": None,
        # the judge's path (the defaults, the tiny preset's, grade the board sft with Stockfish)
        "reward": "model",
        "text_format": None,
        "masked": False,
        "samples_per_state": 1,
        "gamma": 1.0,
        "table_positions": 0.0,
        "legal_coef": 1.0,
        "learning_rate": 1e-5,
        "value_clip": 0.2,
        "max_staleness": 1,
    },
    "grpo": {
        "text_format": "moves",
        "policy_share": 1.0,
        "iterations": 2,
        "prompts_per_iteration": 4,
        "group_size": 4,
        "stockfish_nodes": 200,
        "heldout_positions": 8,
        "time_limit_minutes": None,
        # unmasked, on the games table's positions only (the defaults: masked, half its own games)
        "masked": False,
        "own_positions": 0.0,
        "own_opponent": "self",
        "legal_weight": 0.0,
        "dead_zone": 0.0,
        "std_floor": 0.0,
        "learning_rate": 1e-5,
        "checkpoint_interval": 5,
    },
    "dpo": {
        "max_steps": 2,
        "batch_size": 4,
        "warmup_steps": 0,
        "eval_every": 2,
        "heldout_pairs": 20,
        "heldout_positions": 8,
        "quality_nodes": 200,
    },
    "evaluate": {"ladder": False, "suites": [], "quality_nodes": 0, "max_plies": 40, "random_plies": 4},
    "rlaif": {"compare_games": 2},
}


@pytest.mark.slow
def test_a_grpo_sweep_nests_its_trials_in_mlflow_and_writes_a_loadable_best_config(
    tmp_path, tiny_lm_dir, random_games, local_ray, capsys
):
    """tune for real, grpo of an untrained tiny policy on a games table: 2 grid points of
    grpo.beta, both trials at once, ASHA (2 iterations, grace period 1: a trial may be stopped
    after its first), a driver of its own (its embedded Ray, with the dashboard ASHA's stops
    need); then the same command resumes (nothing left to run), and another space under the
    same name is refused. Those two run no trial: they go through the command's ``main`` in
    this process, on the session's Ray (a driver and a Ray start each cost ~15 s), and the
    resume reads the sweep from storage all the same (another Ray cluster than the sweep's)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from cluster.config import load_config, resolve_preset
    from pipelines import tune
    from pipelines.config import ChessRLConfig

    tmp, run = tmp_path, tmp_path / "runs" / MICRO["run"]["name"]
    (tmp / "micro.yaml").write_text(yaml.safe_dump(MICRO))
    tracking = f"sqlite:///{tmp / 'tune-mlflow.db'}"
    command = [
        sys.executable,
        "-m",
        "pipelines.tune",
        "--config",
        str(tmp / "micro.yaml"),
        "--storage",
        str(tmp / "runs"),
        "--tracking",
        "--tracking-uri",
        tracking,
        "--phase",
        "grpo",
        "--name",
        "beta",
        "--max-concurrent",
        "2",
        "--grace-period",
        "1",
        "--set",
        f"grpo.policy={tiny_lm_dir}",
        "--set",
        f"grpo.games={random_games(tmp / 'games')}",
        "--set",
        "grpo.iterations=2",
        "--set",
        "grpo.checkpoint_interval=1",
        "--set",
        "grpo.heldout_positions=0",
        "--set",
        "grpo.cpus_per_worker=0.5",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env["PYTHONUNBUFFERED"] = "1"
    first = subprocess.run(
        [*command, "--space", "grpo.beta=0,0.1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    sweep = run / "tune" / "beta"
    rows = json.loads((sweep / "trials.json").read_text())
    assert sorted(r["params"]["grpo.beta"] for r in rows) == [0, 0.1]
    assert all(r["status"] in ("finished", "stopped early") for r in rows), rows
    assert all(r["iteration"] in (1, 2) and isinstance(r["metric"], float) for r in rows), rows
    assert "tune summary" in first.stdout and first.stdout.count("grpo.beta=") >= 3  # 2 rows and the best
    # each trial is a real grpo run with its outputs in its own folder
    finished = [r for r in rows if r["status"] == "finished"]
    assert finished and all(
        (sweep / "trials" / r["trial"] / "model" / "config.json").exists() for r in finished
    )

    best = load_config(ChessRLConfig, path=resolve_preset(str(sweep / "best.yaml")))  # what --config does
    winner = max(finished, key=lambda r: r["metric"])
    assert best.grpo.beta == winner["params"]["grpo.beta"] and best.grpo.iterations == 2
    assert f"best config: {sweep / 'best.yaml'}" in first.stdout

    client = MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("chess-rl")
    runs = client.search_runs([experiment.experiment_id])
    (sweep_run,) = [r for r in runs if r.data.tags.get("chess_rl.phase") == "tune"]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == sweep_run.info.run_id]
    assert len(trials) == 2
    assert sorted(float(r.data.params["grpo.beta"]) for r in trials) == [0, 0.1]
    assert all("reward_mean" in r.data.metrics for r in trials)
    assert float(sweep_run.data.params["best.grpo.beta"]) == winner["params"]["grpo.beta"]

    args = command[3:]  # after `python -m pipelines.tune`
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    try:
        again = tune.main([*args, "--space", "grpo.beta=0,0.1"])
        err = capsys.readouterr().err
        assert again == 0 and "resuming the sweep" in err, err[-3000:]
        assert json.loads((sweep / "trials.json").read_text()) == rows

        other = tune.main([*args, "--space", "grpo.beta=0.5"])
        err = capsys.readouterr().err
        assert other == 2 and "another space" in err.strip().splitlines()[-1], err[-2000:]
    finally:  # leave no global state for other tests (Tune's fit keeps its signal handlers)
        mlflow.set_tracking_uri(None)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_rlaif_bad_input_is_one_line_before_any_work(tmp_path, capsys):
    from pipelines import rlaif
    from pipelines.common.phase import EXIT_USER_ERROR

    common = ["--storage", str(tmp_path), "--run-name", "bad", "--no-tracking"]
    cases = [
        (["--only", "xpo"], "rlaif.only"),
        (["--from", "nowhere"], "--from"),
        (["--force", "sft", "x"], "rlaif.force"),
        (["--compare-games", "1"], "rlaif.compare_games"),
        # a moves-format grpo starts from the plain sft: the graph has no rookworld sft to run
        (
            ["--only", "sft-rookworld", "--set", "grpo.text_format=moves", "--set", "grpo.policy_share=1"],
            "unknown phase 'sft-rookworld'",
        ),
        # the graph's grpo node is GRPO: online DPO is its own node
        (["--set", "grpo.loss_type=dpo"], "rlaif.online_dpo: true"),
    ]
    for args, expected in cases:
        assert rlaif.main(["--config", "tiny", *common, *args]) == EXIT_USER_ERROR
        err = capsys.readouterr().err.strip().splitlines()
        errors = [line for line in err if line.startswith("error: ")]
        assert errors == [err[-1]] and expected in err[-1] and "Traceback" not in "".join(err), err
    assert not (tmp_path / "bad").exists()  # nothing written, no Ray started
