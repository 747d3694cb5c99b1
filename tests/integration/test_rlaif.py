"""``rlaif`` for real (Ray, Stockfish, tiny models, every phase at its smallest): the driver killed
with SIGKILL during ``reward``, then the same command: the phases that had finished are skipped
(manifests and outputs untouched), reward resumes from its checkpoint, and the rest of the graph
runs to the head-to-head evaluate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

MICRO = {
    "run": {"name": "m", "seed": 7},
    "ray": {"num_cpus": 2, "object_store_gb": 1},
    "tracking": {"enabled": False},
    "prepare": {"generate": 0, "min_plies": 10, "max_games": 400},
    "sft": {"model": "tiny", "max_steps": 8, "batch_size": 8, "max_length": 128, "warmup_steps": 2,
            "eval_every": 8, "heldout_positions": 10, "torch_compile": "never"},
    "preferences": {"positions": 24, "heldout_positions": 8, "k": 2, "nodes": 300, "shard_positions": 8,
                    "max_invalid_share": 1.0},
    "reward": {"max_steps": 16, "batch_size": 4, "eval_every": 4, "heldout_pairs": 20, "spearman_positions": 3,
               "spearman_nodes": 200},
    "ppo": {"iterations": 2, "episodes_per_iteration": 8, "concurrent_games": 8, "max_actions": 4,
            "critic_warmup": 1, "minibatch": 32, "ppo_epochs": 1, "max_start_ply": 10, "opponents": ["random"],
            "heldout_positions": 8, "time_limit_minutes": None},
    "grpo": {"text_format": "moves", "policy_share": 1.0, "iterations": 2, "prompts_per_iteration": 4,
             "group_size": 4, "stockfish_nodes": 200, "heldout_positions": 8, "time_limit_minutes": None},
    "dpo": {"max_steps": 2, "batch_size": 4, "warmup_steps": 0, "eval_every": 2, "heldout_pairs": 20,
            "heldout_positions": 8, "quality_nodes": 200},
    "evaluate": {"ladder": False, "suites": [], "quality_nodes": 0, "max_plies": 40, "random_plies": 4},
    "rlaif": {"compare_games": 2},
}  # fmt: skip


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory, pgn_dir, registered_checkpoints, killed_run) -> dict[str, Any]:
    """The micro rlaif run, killed during reward and run again: what the tests below look at
    (the tune test sweeps grpo on its sft model)."""
    tmp_path = tmp_path_factory.mktemp("rlaif")
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
    with killed_run(command, env=env, log=tmp_path / "first.log") as first:
        first.wait_for(lambda: registered_checkpoints(run / "reward"), timeout=420)
        alive = first.running
    finished = {
        p.stem: p.read_bytes() for p in manifests.glob("*.json") if not p.name.endswith(".started.json")
    }
    reward_started = (manifests / "reward.started.json").exists()
    sft_model = (run / "sft" / "model" / "model.safetensors").read_bytes() if finished else b""
    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    graph = (run / "rlaif" / "graph.json").read_text() if rerun.returncode == 0 else ""
    # the rerun's comparison, before the changed run below writes its own
    compared = {name: (run / folder / name).read_text() if rerun.returncode == 0 else ""
                for folder, name in (("evaluate/eval", "results.json"), ("rlaif", "comparison.md"))}  # fmt: skip
    manifests_after = {p.name: p.read_bytes() for p in manifests.glob("*.json")}
    # a changed grpo section: grpo and what is built from it run again, nothing else
    # (and an online-dpo node added: grpo's section with loss_type dpo, beside grpo, in the comparison)
    changed = subprocess.run([*command, "--set", "grpo.beta=0.07", "--set", "rlaif.online_dpo=true"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=900) if rerun.returncode == 0 else None  # fmt: skip
    return {"tmp": tmp_path, "run": run, "env": env, "alive": alive, "first_log": (tmp_path / "first.log").read_text(),
            "finished": finished, "reward_started": reward_started, "sft_model": sft_model, "rerun": rerun,
            "graph": graph, "manifests": manifests_after, "changed": changed, "compared": compared}  # fmt: skip


@pytest.mark.slow
def test_rlaif_killed_during_reward_resumes_and_skips_what_finished(micro_run):
    run, rerun, first_log = micro_run["run"], micro_run["rerun"], micro_run["first_log"]
    manifests = run / "rlaif" / "manifests"
    assert micro_run["alive"], first_log[-3000:]  # killed while it ran, not after it ended
    finished = micro_run["finished"]
    assert micro_run["reward_started"]  # reward had started: the rerun resumes it
    assert set(finished) == {"prepare", "sft", "preferences"}, first_log[-3000:]

    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    graph = json.loads(micro_run["graph"])
    states = {n["node"]: n["state"] for n in graph["nodes"]}
    assert states == {"prepare": "skipped", "sft": "skipped", "preferences": "skipped", "reward": "done",
                      "ppo": "done", "grpo": "done", "dpo": "done", "evaluate": "done"}  # fmt: skip
    assert all((manifests / f"{n}.json").read_bytes() == b for n, b in finished.items())
    assert (run / "sft" / "model" / "model.safetensors").read_bytes() == micro_run["sft_model"]
    # the driver says what runs, and each learner's progress; no Ray worker line repeats it
    assert "[rlaif] plan: 5 phase(s) to run: reward, ppo, grpo, dpo, evaluate" in rerun.stderr
    assert "[rlaif] plan: skipped (done with this config): prepare, sft, preferences" in rerun.stderr
    for last in ("[reward] step 16/16 (100%)", "[ppo] iteration 2/2 (100%)", "[grpo] iteration 2/2 (100%)",
                 "[dpo] step 2/2 (100%)"):
        assert last in rerun.stderr, last
    assert not re.findall(r"\((RayTrainWorker|TrainController) pid=\d+\).*(\] iteration \d|\] step \d|\{'loss')", out)
    assert "[reward] resuming from the checkpoint of step" in out
    # reward resumed where its last registered checkpoint was, and ran to its last step; the
    # Spearman positions were scored once, by the killed run (what test_reward_phase's kill test
    # checked on its own, at the cost of another 100 s)
    reward = json.loads((run / "reward" / "summary.json").read_text())
    assert reward["steps"] == MICRO["reward"]["max_steps"]
    assert 0 < reward["resumed_from_step"] < MICRO["reward"]["max_steps"]
    assert f"resumed from step {reward['resumed_from_step']}" in rerun.stdout
    assert "Stockfish scores every legal move" in first_log and "Stockfish scores every legal move" not in out
    for name in ("reward", "ppo", "grpo", "dpo"):
        assert (run / name / "model" / "config.json").exists(), name
    assert json.loads((run / "grpo" / "model" / "config.json").read_text())["chessrl_text_format"] == "moves"
    results = json.loads(micro_run["compared"]["results.json"])
    ppo, grpo, dpo, sft = (f"lm:{run / name / 'model'},masked" for name in ("ppo", "grpo", "dpo", "sft"))
    assert results["players"] == [ppo, grpo, dpo, sft, "random"]  # masked, adjudicated at the cap
    # each RL policy against its start (the sft) and the random mover, the start against the random mover
    assert results["games"] == 7 * 2
    assert "evaluate summary" in rerun.stdout and "rlaif: graph state" in rerun.stdout
    assert "```mermaid" in (run / "rlaif" / "graph.md").read_text()
    table = micro_run["compared"]["comparison.md"]
    assert "What RL did" in table and "(anchor)" in table and "row vs column" in table
    story = table.split("What RL did")[1].split("The comparison's")[0]
    for phase in ("ppo", "grpo", "dpo"):  # its paired gain over its start, its games against the start and random
        row = next(line for line in story.splitlines() if line.strip().startswith(f"{phase} "))
        assert re.search(r"^\s*\w+\s+sft\s+[+-]\d\.\d{4} \[[+-]\d\.\d{4}, [+-]\d\.\d{4}\] (better|worse|no change)"
                         r"\s+\d+\.\d% \(\+\d+ =\d+ -\d+\)\s+\d+\.\d% \(\+\d+ =\d+ -\d+\)$", row), row
    assert "significant:" in story and "--mode sprt" in story


@pytest.mark.slow
def test_a_changed_grpo_section_reruns_grpo_and_evaluate_only(micro_run):
    changed = micro_run["changed"]
    assert changed is not None and changed.returncode == 0, changed and changed.stderr[-3000:]
    run, before = micro_run["run"], micro_run["manifests"]
    graph = json.loads((run / "rlaif" / "graph.json").read_text())
    states = {n["node"]: n["state"] for n in graph["nodes"]}
    assert states == {"prepare": "skipped", "sft": "skipped", "preferences": "skipped", "reward": "skipped",
                      "ppo": "skipped", "grpo": "done", "online-dpo": "done", "dpo": "skipped",
                      "evaluate": "done"}  # fmt: skip
    after = {p.name: p.read_bytes() for p in (run / "rlaif" / "manifests").glob("*.json")}
    unchanged = {"prepare.json", "sft.json", "preferences.json", "reward.json", "ppo.json", "dpo.json"}
    assert {n for n in unchanged if after[n] == before[n]} == unchanged
    assert after["grpo.json"] != before["grpo.json"] and after["evaluate.json"] != before["evaluate.json"]
    assert "its config or an input changed: clearing" in changed.stderr
    online = json.loads((run / "online-dpo" / "summary.json").read_text())  # its own folder, grpo's untouched
    assert online["phase"] == "online-dpo" and (run / "online-dpo" / "model" / "config.json").exists()
    assert (run / "grpo" / "model" / "config.json").exists()
    logged = [json.loads(line) for line in (run / "online-dpo" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert logged and all("pairs" in row and "dpo_loss" in row for row in logged)
    results = json.loads((run / "evaluate" / "eval" / "results.json").read_text())
    online, grpo = (f"lm:{run / name / 'model'},masked" for name in ("online-dpo", "grpo"))
    assert results["players"][1:3] == [grpo, online] and results["games"] == 9 * 2  # against its start and random
    story = (run / "rlaif" / "comparison.md").read_text().split("What RL did")[1].split("The comparison's")[0]
    assert any(line.strip().startswith("online-dpo ") for line in story.splitlines()), story


@pytest.mark.slow
def test_a_grpo_sweep_nests_its_trials_in_mlflow_and_writes_a_loadable_best_config(micro_run):
    """tune for real on the micro run's sft model: 2 grid points of grpo.beta, both trials at once,
    ASHA (2 iterations, grace period 1: a trial may be stopped after its first); then the same command resumes (nothing left to run), and another space under the same
    name is refused."""
    from mlflow.tracking import MlflowClient

    from cluster.config import load_config, resolve_preset
    from pipelines.config import ChessRLConfig

    tmp, run = micro_run["tmp"], micro_run["run"]
    assert micro_run["rerun"].returncode == 0
    tracking = f"sqlite:///{tmp / 'tune-mlflow.db'}"
    command = [sys.executable, "-m", "pipelines.tune", "--config", str(tmp / "micro.yaml"),
               "--storage", str(tmp / "runs"), "--tracking", "--tracking-uri", tracking,
               "--phase", "grpo", "--name", "beta", "--max-concurrent", "2", "--grace-period", "1",
               "--set", "grpo.iterations=2", "--set", "grpo.checkpoint_interval=1", "--set", "grpo.heldout_positions=0",
               "--set", "grpo.cpus_per_worker=0.5"]  # fmt: skip
    env = {k: v for k, v in micro_run["env"].items() if k != "MLFLOW_TRACKING_URI"}
    first = subprocess.run([*command, "--space", "grpo.beta=0,0.1"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    sweep = run / "tune" / "beta"
    rows = json.loads((sweep / "trials.json").read_text())
    assert sorted(r["params"]["grpo.beta"] for r in rows) == [0, 0.1]
    assert all(r["status"] in ("finished", "stopped early") for r in rows), rows
    assert all(r["iteration"] in (1, 2) and isinstance(r["metric"], float) for r in rows), rows
    assert "tune summary" in first.stdout and first.stdout.count("grpo.beta=") >= 3  # 2 rows and the best
    # each trial is a real grpo run with its outputs in its own folder
    finished = [r for r in rows if r["status"] == "finished"]
    assert finished and all((sweep / "trials" / r["trial"] / "model" / "config.json").exists() for r in finished)

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

    again = subprocess.run([*command, "--space", "grpo.beta=0,0.1"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert again.returncode == 0 and "resuming the sweep" in again.stderr, again.stderr[-3000:]
    assert json.loads((sweep / "trials.json").read_text()) == rows

    other = subprocess.run([*command, "--space", "grpo.beta=0.5"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    assert other.returncode == 2 and "another space" in other.stderr.strip().splitlines()[-1], other.stderr[-2000:]


def test_rlaif_bad_input_is_one_line_before_any_work(tmp_path, capsys):
    from pipelines import rlaif
    from pipelines.phase import EXIT_USER_ERROR

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
