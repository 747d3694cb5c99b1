"""``grpo`` with real Stockfish, Ray and a tiny model: the start policy sits where a rookworld
``sft`` writes it (``sft-rookworld/model``, marked with its text format); the run's prompts,
metrics and model agree (the task mix is 80/20 in every batch, every iteration logged once, the
policy answers a ``P: <FEN> M:`` prompt through transformers alone). The learner runs as two
data-parallel workers. A scorer (a reward model) as the policy trains and keeps its format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.data.pgn import read_pgn_file

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def games(tmp_path_factory, pgn_dir) -> Path:
    """A games table (the prepare schema's game_id and moves) of 300 real games."""
    with open(pgn_dir / "lichess-2021-10-sample.pgn", "rb") as handle:
        records, _ = read_pgn_file(handle, "lichess")
    folder = tmp_path_factory.mktemp("grpo-games") / "games"
    folder.mkdir()
    rows = records[:300]
    pq.write_table(
        pa.table(
            {
                "game_id": [r.game_id for r in rows],
                "moves": [r.moves for r in rows],
                "result": [r.result for r in rows],
            }
        ),
        folder / "part-0.parquet",
    )
    return folder


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out.pop("RAY_ADDRESS", None)
    return out


@pytest.mark.slow
def test_rookworld_grpo_on_two_workers_keeps_its_task_mix(
    tmp_path, games, registered_checkpoints, local_ray, capsys
):
    """grpo from the rookworld sft's default place: an untrained tiny model marked rookworld, as
    ``sft --text-format rookworld`` writes it (test_sft trains one; 12 steps of it taught the
    policy nothing the test could see, for 25 s). Its paired figure is ``evaluate --mode
    paired``'s of the same two models, exactly: one measure, the same positions."""
    from chessrl.lm.models import build_model
    from pipelines.sft import mark_text_format

    common = ["--config", "tiny", "--storage", str(tmp_path), "--run-name", "g", "--no-tracking"]
    start = tmp_path / "g" / "sft-rookworld" / "model"
    model, tokenizer = build_model("tiny")
    model.save_pretrained(start)
    tokenizer.save_pretrained(start)
    mark_text_format(start, "rookworld")

    phase = tmp_path / "g" / "grpo"
    command = [
        sys.executable,
        "-m",
        "pipelines.grpo",
        *common,
        "--num-cpus",
        "2",
        "--games",
        str(games),
        "--iterations",
        "3",
        "--prompts-per-iteration",
        "10",
        "--group-size",
        "4",
        "--checkpoint-interval",
        "1",
        "--stockfish-nodes",
        "200",
        "--max-new-tokens-environment",
        "64",
        "--heldout-positions",
        "10",
        "--text-format",
        "rookworld",
        "--policy-share",
        "0.8",
        "--own-positions",
        "0",
        "--no-masked",
        "--num-workers",
        "2",  # data-parallel: each worker half of every iteration's prompts
    ]
    run = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert registered_checkpoints(phase) >= 1  # a checkpoint an iteration, as asked

    planned = json.loads((phase / "prompts.json").read_text())
    prompts = planned["prompts"]
    assert len(prompts) == 30
    for i in range(3):  # 8 policy and 2 environment prompts in every batch: 80/20
        batch = prompts[i * 10 : (i + 1) * 10]
        assert sum(p["task"] == "policy" for p in batch) == 8
    assert abs(planned["drawn"]["policy_share"] - 0.8) <= 0.05
    assert sum(planned["drawn"]["phases"].values()) == 30
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    iterations = [m["iteration"] for m in metrics]
    assert iterations == [1, 2, 3]  # every iteration logged once
    assert all(abs(m["policy_share"] - 0.8) <= 0.05 for m in metrics)
    # both workers' samples in every iteration's figures
    assert all(
        m["samples"] == 40 and m["workers"] == 2 and -1.0 <= m["reward_policy"] <= 1.0 for m in metrics
    )
    assert all(0.0 <= m["zero_variance_groups"] <= 1.0 and m["kl"] >= 0.0 for m in metrics)
    summary = json.loads((phase / "summary.json").read_text())
    assert summary["iterations"] == 3
    assert set(summary["heldout"]) == {"start", "final"}
    assert (
        summary["heldout"]["final"]["policy_positions"] + summary["heldout"]["final"]["env_positions"] == 10
    )
    assert "grpo summary" in run.stdout and "held-out" in run.stdout
    quality = summary["quality"]
    assert quality["positions"] == 10 and 3 <= quality["games"] <= 10

    from pipelines import evaluate
    from pipelines.common.phase import EXIT_OK

    assert (
        evaluate.main(
            [
                *common,
                "--mode",
                "paired",
                "--players",
                f"lm:{start}",
                f"lm:{phase / 'model'}",
                "--positions",
                "10",
                "--quality-nodes",
                "200",
                "--positions-from",
                str(games),
            ]
        )
        == EXIT_OK
    )
    capsys.readouterr()
    paired = json.loads((tmp_path / "g" / "evaluate" / "eval" / "results.json").read_text())
    figure = paired["runs"][f"lm:{phase / 'model'}"]
    assert {k: figure[k] for k in quality if k in figure} == {k: quality[k] for k in figure if k in quality}
    assert (figure["gain"], figure["low"], figure["high"]) == (
        quality["gain"],
        quality["low"],
        quality["high"],
    )

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = phase / "model"
    assert json.loads((model_dir / "config.json").read_text())["chessrl_text_format"] == "rookworld"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = tokenizer("P: rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 M:", return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=2, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert generated.shape[1] > ids["input_ids"].shape[1]


@pytest.mark.slow
def test_annotate_s_pairs_train_a_fresh_judge_and_grpo_trains_it_as_a_policy(
    tmp_path, games, local_ray, capsys
):
    """The judge's path, phase by phase on one run: annotate's pairs train a judge on a fresh
    backbone (``reward --source annotate --model tiny``, no sft model), and ``grpo --start judge``
    trains that judge as a policy (its softmax over the legal moves): every sampled move is legal,
    half of them in the scorer's own games (the preset's), the exported model is still a scorer
    that reads its own format (transformers alone loads it), the paired figure and the next
    command play it as a judge. Asking it RookWorld's tasks is one line before any work."""
    from transformers import AutoModelForSequenceClassification

    from pipelines import annotate, grpo, reward
    from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

    common = ["--config", "tiny", "--storage", str(tmp_path), "--run-name", "s", "--no-tracking"]
    small = ["--positions", "8", "--heldout-positions", "4", "--shard-positions", "8", "--nodes", "20"]
    assert annotate.main([*common, "--games", str(games), *small]) == EXIT_OK
    judge = ["--source", "annotate", "--model", "tiny", "--text-format", "facts", "--max-steps", "4"]
    judge += ["--batch-size", "4", "--eval-every", "4", "--heldout-pairs", "8", "--spearman-positions", "0"]
    assert reward.main([*common, *judge, "--normalize-pairs", "16"]) == EXIT_OK, capsys.readouterr().out[
        -2000:
    ]
    assert (tmp_path / "s" / "reward" / "backbone" / "config.json").exists()  # the fresh backbone, kept
    start = tmp_path / "s" / "reward" / "model"
    common += ["--start", "judge", "--games", str(games)]
    rookworld = ["--text-format", "rookworld", "--policy-share", "0.8", "--own-positions", "0"]
    capsys.readouterr()
    assert grpo.main([*common, *rookworld]) == EXIT_USER_ERROR
    assert "is a scorer" in capsys.readouterr().err.strip().splitlines()[-1]
    code = grpo.main(
        [
            *common,
            "--text-format",
            "board",  # the prompts' format; the scorer reads its own (facts)
            "--iterations",
            "2",
            "--prompts-per-iteration",
            "4",
            "--group-size",
            "4",
            "--stockfish-nodes",
            "200",
            "--heldout-positions",
            "6",
            "--grade-scale",
            "margin",
        ]
    )
    out = capsys.readouterr().out
    assert code == EXIT_OK, out[-2000:]
    phase = tmp_path / "s" / "grpo"
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert all(m["samples"] == 16 and m["legal_rate"] == 1.0 and "reward_own" in m for m in metrics)
    summary = json.loads((phase / "summary.json").read_text())
    assert summary["policy_kind"] == "scorer" and summary["heldout"]["final"]["legal_rate"] == 1.0
    assert summary["quality"]["positions"] > 0 and summary["quality"]["final_unmasked_legal"] == 1.0
    model = AutoModelForSequenceClassification.from_pretrained(phase / "model")
    assert model.config.chessrl_text_format == "facts" and model.config.num_labels == 1
    assert f"judge:{phase / 'model'} judge:{start}" in out
