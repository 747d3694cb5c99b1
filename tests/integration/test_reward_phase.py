"""reward on the local Ray: two Ray Train workers finish (no hang); the saved reward model loads
with transformers alone and scores a move there exactly as the RewardServer does; bad input is
one clear message. (A driver killed with SIGKILL during reward resumes from its last checkpoint:
tests/system/test_rlaif_system.py kills the rlaif driver there and checks the resume.)

The pairs are built from real games with python-chess (chosen: the move played, rejected: another
legal move), in the preference schema and layout (``train/``, ``heldout/``): what is tested here
is the training, not the judging (tests/integration/test_preferences_phase.py does that)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.data.pgn import decode_game, iter_raw_games, parse_game
from chessrl.rl.preferences import PREFERENCE_SCHEMA
from pipelines import reward
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prefs(tmp_path_factory, pgn_dir, preference_pair_rows) -> Path:
    games = []
    for path in sorted(pgn_dir.glob("*.pgn")):
        with open(path, "rb") as handle:
            for raw in iter_raw_games(handle):
                game = parse_game(decode_game(raw)[0])
                if game.moves and not game.error:
                    games.append(list(game.moves))
    assert len(games) >= 8
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("prefs") / "preferences"
    for name, part in (("train", games[:-3]), ("heldout", games[-3:])):
        rows = preference_pair_rows(part, name, rng)
        (folder / name).mkdir(parents=True)
        pq.write_table(
            pa.Table.from_pylist(rows, schema=PREFERENCE_SCHEMA), folder / name / "shard-00000.parquet"
        )
    return folder


def reward_args(storage: Path, prefs: Path, backbone: Path, *extra: str) -> list[str]:
    return [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "r",
        "--no-tracking",
        "--preferences",
        str(prefs),
        "--base-model",
        str(backbone),
        "--batch-size",
        "4",
        "--spearman-positions",
        "3",
        "--spearman-nodes",
        "200",
        "--heldout-pairs",
        "40",
        "--normalize-pairs",
        "50",
        *extra,
    ]


SCORE_WITH_TRANSFORMERS = textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    folder, texts = sys.argv[1], json.loads(sys.argv[2])
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            batch = tok(text + tok.eos_token, return_tensors="pt")
            out.append(model(**batch).logits[0, 0].item())
    print(json.dumps({"scores": out, "mean": model.config.chessrl_reward_mean,
                      "std": model.config.chessrl_reward_std}))
    """
)


@pytest.mark.slow
def test_two_workers_finish_and_the_model_scores_the_same_through_transformers_and_the_server(
    tmp_path, prefs, tiny_lm_dir, local_ray, capsys
):
    from actors.reward_server import RewardClient
    from chessrl.rl.reward import RewardQuery

    code = reward.main(
        reward_args(
            tmp_path,
            prefs,
            tiny_lm_dir,
            "--num-workers",
            "2",
            "--cpus-per-worker",
            "1",
            "--max-steps",
            "6",
            "--eval-every",
            "3",
        )
    )
    captured = capsys.readouterr()
    out = captured.out
    assert code == EXIT_OK, out[-3000:]
    summary = json.loads((tmp_path / "r" / "reward" / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["train_pairs"] > 50 and summary["heldout_pairs"] == 40
    assert 0.0 <= summary["heldout_accuracy"] <= 1.0
    assert summary["spearman_positions"] == 3 and -1.0 <= summary["heldout_spearman"] <= 1.0
    assert summary["reward_std"] > 0
    assert "training pairs for the reward's mean" not in captured.err  # rank 0 measured it at its last step
    # the driver's progress lines (stderr), from rank 0's reports; the workers do not print them
    assert "[reward] step 6/6 (100%)" in captured.err and "held-out accuracy" in captured.err
    assert "held-out accuracy" not in out
    model_dir = tmp_path / "r" / "reward" / "model"
    assert not list(model_dir.glob("optimizer*"))
    # every checkpoint says what its judge reads, as the export does: read as a judge, it reads that
    checkpoints = list((tmp_path / "r" / "reward" / "ray").glob("*/checkpoint_*/checkpoint/config.json"))
    assert checkpoints and all(
        json.loads(c.read_text())["chessrl_text_format"] == summary["text_format"] for c in checkpoints
    )

    queries = [
        RewardQuery(("e2e4", "e7e5"), "g1f3"),
        RewardQuery((), "d2d4"),
        RewardQuery(("d2d4", "d7d5", "c2c4"), "e7e6"),
    ]
    # transformers alone, in a process that imports nothing of this project
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCORE_WITH_TRANSFORMERS,
            str(model_dir),
            json.dumps([q.text() for q in queries]),
        ],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain["mean"] == pytest.approx(summary["reward_mean"]) and plain["std"] > 0

    client = RewardClient.create(str(model_dir), run="rm-phase-test", num_cpus=0)
    try:
        raw = client.score(queries, normalized=False)
        normalized = client.score(queries)
    finally:
        client.shutdown()
    assert raw == pytest.approx(plain["scores"], abs=1e-5)
    assert normalized == pytest.approx(
        [(s - plain["mean"]) / plain["std"] for s in plain["scores"]], abs=1e-5
    )


def test_bad_input_is_one_clear_message(tmp_path, prefs, tiny_lm_dir, local_ray, capsys, driver_err):
    def run(*args: str) -> str:
        code = reward.main(
            ["--config", "tiny", "--storage", str(tmp_path), "--run-name", "bad", "--no-tracking", *args]
        )
        # the driver's own lines: the session's Ray may forward a line of an actor an earlier test
        # stopped (a RewardServer's "Event loop is closed" as its loop shuts down)
        err = driver_err(capsys.readouterr().err)
        assert code == EXIT_USER_ERROR, err
        assert "Traceback" not in err
        return err.strip().splitlines()[-1]

    # no sft model in the run, no --base-model
    assert "no sft model" in run("--preferences", str(prefs))
    # no preference pairs
    assert "no preference pairs" in run("--base-model", str(tiny_lm_dir))
    # a preference Parquet without `chosen`
    broken = tmp_path / "broken"
    broken.mkdir()
    pq.write_table(pa.table({"prompt": ["e2e4"], "rejected": [" e7e5"]}), broken / "pairs.parquet")
    line = run("--preferences", str(broken), "--base-model", str(tiny_lm_dir))
    assert "no column chosen" in line and "pairs.parquet" in line
    # a base model that is not GPT-2-style
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    line = run("--preferences", str(prefs), "--base-model", str(llama))
    assert "llama" in line and "GPT-2" in line and "reward.base_model" in line
    # a base model folder that does not exist
    assert "not a transformers checkpoint" in run(
        "--preferences", str(prefs), "--base-model", str(tmp_path / "none")
    )
    # more pairs a step than the table has
    line = run("--preferences", str(prefs), "--base-model", str(tiny_lm_dir), "--batch-size", "100000")
    assert "training pairs" in line and "--batch-size" in line
    # a config value out of range never reaches Ray
    assert "reward.learning_rate" in run("--learning-rate", "0")
