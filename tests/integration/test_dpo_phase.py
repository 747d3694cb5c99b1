"""dpo on the local Ray: the driver killed with SIGKILL after a registered checkpoint, the same
command resumes there and finishes, and the saved policy generates through transformers alone;
bad input is one clear message before Ray starts any work.

The pairs are built from real games with python-chess (chosen: the move played, rejected: another
legal move), in the preference schema and layout (``train/``, ``heldout/``), as
tests/integration/test_reward_phase.py builds them: what is tested here is the training, not the
judging."""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.data.pgn import decode_game, iter_raw_games, parse_game
from chessrl.rl.preferences import PREFERENCE_SCHEMA
from pipelines import dpo
from pipelines.common.phase import EXIT_USER_ERROR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prefs(tmp_path_factory, pgn_dir, preference_pair_rows) -> Path:
    """A preference table of 8 real games: 6 to train on (~80 pairs), 2 held out."""
    games = []
    with open(pgn_dir / "lichess-2021-10-sample.pgn", "rb") as handle:
        for raw in iter_raw_games(handle):
            game = parse_game(decode_game(raw)[0])
            if len(game.moves) >= 20 and not game.error:
                games.append(list(game.moves))
            if len(games) == 8:
                break
    assert len(games) == 8
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("dpo-prefs") / "preferences"
    for name, part in (("train", games[:6]), ("heldout", games[6:])):
        (folder / name).mkdir(parents=True)
        table = pa.Table.from_pylist(preference_pair_rows(part, name, rng), schema=PREFERENCE_SCHEMA)
        pq.write_table(table, folder / name / "shard-00000.parquet")
    return folder


def env() -> dict[str, str]:
    out = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out.pop("RAY_ADDRESS", None)
    return out


GENERATE_WITH_TRANSFORMERS = textwrap.dedent(
    """
    import json, sys
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tok("e2e4 e7e5", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    print(json.dumps({"prompt": ids["input_ids"].shape[1], "generated": out.shape[1],
                      "format": model.config.chessrl_text_format,
                      "text": tok.decode(out[0, ids["input_ids"].shape[1]:])}))
    """
)


@pytest.mark.slow
def test_dpo_killed_after_a_checkpoint_resumes_and_saves_a_transformers_model(
    tmp_path, prefs, tiny_lm_dir, registered_checkpoints, last_registered_step, killed_run
):
    phase = tmp_path / "r" / "dpo"
    # the policy as a user types it, relative to where the command runs: the Ray Train worker,
    # whose working directory is its own, must still find it
    policy = os.path.relpath(tiny_lm_dir, ROOT)
    command = [
        sys.executable,
        "-m",
        "pipelines.dpo",
        "--config",
        "tiny",
        "--storage",
        str(tmp_path),
        "--run-name",
        "r",
        "--no-tracking",
        "--no-dashboard",
        "--preferences",
        str(prefs),
        "--policy",
        policy,
        "--batch-size",
        "4",
        "--max-steps",
        "12",
        "--eval-every",
        "2",
        "--heldout-positions",
        "0",
    ]
    with killed_run(command, env=env(), log=tmp_path / "first.log") as run:
        # Ray Train has recorded one (a file alone may be half-reported)
        run.wait_for(lambda: registered_checkpoints(phase), timeout=300, poll=0.1)
        first = (tmp_path / "first.log").read_text()[-3000:]
        assert run.running, "dpo ended before the driver could be killed:\n" + first
        assert registered_checkpoints(phase) >= 1, first
    assert not (phase / "summary.json").exists()
    registered = last_registered_step(phase)  # read after the kill

    rerun = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    summary = json.loads((phase / "summary.json").read_text())
    # it resumed from a checkpoint (every 2 steps) no older than the last one Ray Train had
    # registered before the kill: nothing registered is lost
    resumed = summary["resumed_from_step"]
    assert summary["steps"] == 12 and resumed % 2 == 0 and 2 <= registered <= resumed < 12, (
        resumed,
        registered,
    )
    assert summary["text_format"] == "moves" and summary["kinds"] == ["worse", "ranked", "random", "illegal"]
    assert summary["train_pairs"] > 24 and summary["heldout_pairs"] > 0 and summary["quality"] == {}
    assert 0.0 <= summary["heldout_choice_accuracy"] <= 1.0
    assert "dpo summary" in rerun.stdout and "resumed from step" in rerun.stdout

    # transformers alone, in a process that imports nothing of this project
    done = subprocess.run(
        [sys.executable, "-c", GENERATE_WITH_TRANSFORMERS, str(phase / "model")],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain["format"] == "moves" and plain["generated"] > plain["prompt"] == 3, plain  # <bos> e2e4 e7e5


def test_bad_input_is_one_clear_message(tmp_path, prefs, tiny_lm_dir, local_ray, capsys, driver_err):
    def run(*args: str) -> str:
        code = dpo.main(
            ["--config", "tiny", "--storage", str(tmp_path), "--run-name", "bad", "--no-tracking", *args]
        )
        err = driver_err(capsys.readouterr().err)
        assert code == EXIT_USER_ERROR, err
        assert "Traceback" not in err
        assert not (tmp_path / "bad" / "dpo").exists(), err  # nothing written: no Ray work began
        return err.strip().splitlines()[-1]

    policy = ("--policy", str(tiny_lm_dir))
    # no preference pairs
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no preference pairs" in run(*policy, "--preferences", str(empty))
    # pairs, but none of the kinds asked for
    line = run(*policy, "--preferences", str(prefs), "--kinds", "unparseable")
    assert "no training pairs of the kinds" in line and "unparseable" in line and "worse" in line

    # a reference of another shape than the policy's
    from transformers import GPT2Config, GPT2LMHeadModel

    policy_config = json.loads((tiny_lm_dir / "config.json").read_text())
    other = tmp_path / "other"
    shape = {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": policy_config["n_positions"]}
    GPT2LMHeadModel(GPT2Config(vocab_size=policy_config["vocab_size"], **shape)).save_pretrained(other)
    for name in itertools.chain(tiny_lm_dir.glob("*token*"), tiny_lm_dir.glob("*vocab*")):
        shutil.copy(name, other / name.name)
    line = run(*policy, "--preferences", str(prefs), "--reference", str(other))
    assert "--reference" in line and "architecture" in line and "n_layer 1 (policy: 4)" in line

    # beta must be above zero
    for beta in ("0", "-1"):
        assert "dpo.beta" in run(*policy, "--preferences", str(prefs), "--beta", beta)

    # a policy that is not a GPT-2 causal LM
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    line = run("--policy", str(llama), "--preferences", str(prefs))
    assert "llama" in line and "GPT-2" in line and "dpo.policy" in line
