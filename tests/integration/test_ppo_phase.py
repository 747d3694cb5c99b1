"""``ppo`` with real Ray, tiny models and Stockfish grading the moves (the RewardServer's ppo runs in
the rlaif test): a collector killed with SIGKILL, then the driver; the same command resumes, and the finished run's shards, metrics, learner state and
model agree with one another (nothing written twice, nothing read twice, no sample newer than the
learner or staler than the bound)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]

SMALL = [
    "--iterations",
    "3",
    "--episodes-per-iteration",
    "16",
    "--concurrent-games",
    "8",
    "--max-actions",
    "4",
    "--critic-warmup",
    "1",
    "--minibatch",
    "32",
    "--ppo-epochs",
    "1",
    "--max-start-ply",
    "10",
]


def shard_rows(phase: Path) -> list[dict]:
    rows = []
    for path in sorted((phase / "rollouts").glob("shard-*.parquet")):
        rows += [dict(r, shard=path.name) for r in pq.read_table(path).to_pylist()]
    return rows


def restarts(status: Path) -> int:
    """How many times the collector has started, from its status file (0 while it is rewritten)."""
    try:
        return int(json.loads(status.read_text())["lifetime_starts"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_collector_and_driver_killed_then_the_same_command_resumes(
    tmp_path, tiny_lm_dir, registered_checkpoints, killed_run, random_games
):
    phase = tmp_path / "k" / "ppo"
    games = random_games(tmp_path / "games")
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS")
    command = [
        sys.executable,
        "-m",
        "pipelines.ppo",
        "--storage",
        str(tmp_path),
        "--run-name",
        "k",
        "--no-tracking",
        "--num-cpus",
        "2",
        "--policy",
        str(tiny_lm_dir),
        *SMALL[:1],
        "10",
        *SMALL[2:],
        "--checkpoint-interval",
        "2",
        "--num-workers",
        "2",  # two data-parallel learner workers, killed and resumed with the driver
        # the moves graded by Stockfish, not by the reward model (the rlaif test runs ppo on one):
        # the engines and the critic from the policy resume too
        "--reward",
        "stockfish",
        "--reward-nodes",
        "200",
        # half the episodes one move at a position anywhere in a training game, half its own games
        "--games",
        str(games),
        "--table-positions",
        "0.5",
        # the tiny preset's board format and several moves a state (8 there), at a test's size
        "--samples-per-state",
        "2",
        "--heldout-positions",
        "20",
        "--quality-nodes",
        "200",
        # the preset's: no version of lag. A resumed learner reads the killed run's last shards
        # and publishes while the collector is mid-round; that round must not use up the new
        # version's allowance (the learner drops its older actions), or both wait for ever
        "--max-staleness",
        "0",
        # the workers fed by the Ray Data replay stream, each its own shards (the other tests: arrow)
        "--rollout-reader",
        "stream",
        # the policy of iterations 4, 8 and 10 each plays the start; the best is the model
        "--select-every",
        "4",
        "--select-games",
        "2",
        "--select-max-plies",
        "12",
    ]
    assert command[command.index("--iterations") + 1] == "10"  # iterations left to kill the driver in
    status = phase / "collectors" / "collector-00.json"
    with killed_run(command, env=env, log=tmp_path / "first.log") as run:
        # kill the collector once it has written two shards
        run.wait_for(
            lambda: len(list((phase / "rollouts").glob("shard-00-*.parquet"))) >= 2 and status.exists(),
            timeout=300,
        )
        assert run.running, "ppo ended before the collector could be killed"
        os.kill(json.loads(status.read_text())["pid"], signal.SIGKILL)
        # then the driver, once the learner has a checkpoint past iteration 2 and Ray has
        # restarted the collector (on a loaded machine the checkpoint can come first);
        # recorded by Ray Train, not only written
        run.wait_for(lambda: registered_checkpoints(phase) and restarts(status) >= 2, timeout=300)
        assert run.running, "ppo ended before the driver could be killed"
    assert not (phase / "summary.json").exists()
    record = json.loads(status.read_text())
    assert record["lifetime_starts"] >= 2, record  # Ray restarted the killed collector

    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    assert "learner resumes at iteration" in rerun.stdout + rerun.stderr
    check_outputs(phase, iterations=10, out=rerun.stdout)
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert all(m["workers"] == 2 for m in metrics)
    # Stockfish's grades: in [0, 1], some moves the best and some not; no reward server; the
    # critic is the policy's transformer under a value head
    assert "moves graded by Stockfish at 200 nodes" in rerun.stdout + rerun.stderr
    scores = [r["score"] for r in shard_rows(phase) if r["legal"]]
    assert scores and all(0.0 <= s <= 1.0 for s in scores) and max(scores) == 1.0 and min(scores) < 1.0
    assert all(0.0 <= m["score_mean"] <= 1.0 for m in metrics)
    critic = json.loads((phase / "critic" / "config.json").read_text())
    assert critic["architectures"] == ["GPT2ForSequenceClassification"]
    # the table positions: 4 of each round's 8 episodes, one action each
    lengths: dict[str, int] = {}
    for r in shard_rows(phase):
        lengths[r["episode"]] = lengths.get(r["episode"], 0) + 1
    table = [n for n in lengths if "t-" in n]
    assert len(table) * 2 == len(lengths) and all(lengths[n] == 1 for n in table)
    assert any(lengths[n] > 1 for n in lengths if n not in table)
    # a board prompt does not grow with the game and Stockfish reads no moves: whole games, some
    # longer than the policy's context (a moves-format reader would have them cut to it)
    context = json.loads((tiny_lm_dir / "config.json").read_text())["n_positions"]
    # the kept policy: of the candidates saved (before and after the kill), the best against the
    # start in its games (written under select/), copied into model/
    selection = json.loads((phase / "summary.json").read_text())["selection"]
    assert [c["iteration"] for c in selection["candidates"]] == [4, 8, 10]
    assert all(
        c["games"] == 2 == len(list((phase / "select" / f"iteration-{c['iteration']:04d}").glob("*.json")))
        for c in selection["candidates"]
    )
    best = max(c["score"] for c in selection["candidates"])
    kept = min(c["iteration"] for c in selection["candidates"] if c["score"] == best)
    assert selection["kept"] == kept and f"kept iteration {kept} (" in rerun.stdout
    weights = (phase / "candidates" / f"iteration-{kept:04d}" / "model.safetensors").read_bytes()
    assert (phase / "model" / "model.safetensors").read_bytes() == weights
    # (the same command once more exports nothing over the kept model: final_export_due's
    # doctest; it plays no game again: the arena's resume, test_evaluate.py's kill test)
    cut = [len(m) for m in json.loads((phase / "table.json").read_text())]
    assert max(cut) == 600 > context and min(cut) >= 1


def check_outputs(phase: Path, iterations: int, out: str) -> None:
    """A finished run's shards, metrics, learner state and model agree with one another."""
    summary = json.loads((phase / "summary.json").read_text())
    assert summary["iterations"] == iterations and summary["episodes"] >= iterations * 16
    learner = json.loads((phase / "learner_state.json").read_text())
    rows = shard_rows(phase)
    # every action once, nothing written twice by a restarted collector: (episode, t) unique,
    # t runs 0..n-1 in each episode, and only an episode's last action says it is the last
    keys = [(r["episode"], r["t"]) for r in rows]
    assert len(keys) == len(set(keys)), "an action was written twice"
    by_episode: dict[str, list[dict]] = {}
    for r in rows:
        by_episode.setdefault(r["episode"], []).append(r)
    for actions in by_episode.values():
        assert sorted(a["t"] for a in actions) == list(range(len(actions)))
        assert [a["last"] for a in sorted(actions, key=lambda a: a["t"])][-1]
        assert sum(a["last"] for a in actions) == 1
    assert all(r["last"] for r in rows if not r["legal"])  # an illegal move ends its episode
    # no sample comes from weights newer than the learner's, and none used was staler than the bound
    assert max(r["version"] for r in rows) <= learner["version"]
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    # every iteration logged; a resumed run logs again those after the checkpoint it resumed from
    # (which may be older than the last one written: the driver can die before Ray Train records it)
    logged = [m["iteration"] for m in metrics]
    assert sorted(set(logged)) == list(range(1, iterations + 1)) and logged[-1] == iterations, logged
    restarts = [i for i in range(1, len(logged)) if logged[i] <= logged[i - 1]]
    first, resumed = (logged[: restarts[-1]], logged[restarts[-1] :]) if restarts else ([], logged)
    assert first == list(range(1, len(first) + 1)), logged  # the killed run, from iteration 1
    assert resumed == list(range(resumed[0], iterations + 1)), logged  # the same command, to the end
    assert all(m["version_lag_max"] <= 0 for m in metrics)  # < 0: the killed run's last weights
    # where the time went: the learner's split every iteration, each collector's in its status file
    assert all(m["learner_step_s"] > 0 and m["log_s"] >= 0 and m["report_s"] >= 0 for m in metrics)
    spent = json.loads((phase / "collectors" / "collector-00.json").read_text())["seconds"]
    assert set(spent) == {"sample", "score", "opponents", "weights", "write", "idle"} and spent["score"] > 0
    assert metrics[0]["critic_warmup"] == 1 and "clipfrac" in metrics[-1]
    # nothing read twice; nothing lost but what a collector may play after the learner's last read:
    # what was left of its rounds with the weights that read used, then a full allowance with the
    # final weights (rounds_per_version each: 16 / 8 x (1 + max_staleness 0) = 2), and a round
    # the final weights reached mid-way
    assert len(learner["read"]) == len(set(learner["read"])) == summary["shards_read"]
    written = {p.name for p in (phase / "rollouts").glob("shard-*.parquet")}
    unread = written - set(learner["read"])
    assert set(learner["read"]) <= written and len(unread) <= 2 * 2 * (1 + 0) + 1, sorted(unread)
    # the policy loads and plays through transformers alone
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(phase / "model")
    model = AutoModelForCausalLM.from_pretrained(phase / "model")
    ids = tokenizer("e2e4 e7e5", return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=1, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 1
    assert (phase / "curves.png").stat().st_size > 1000
    assert "ppo summary" in out and "sprt" in out
