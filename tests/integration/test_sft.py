"""sft on the local Ray: TRL's SFTTrainer inside a Ray Train worker, checkpoints, resume, and a
saved model that loads with the Auto classes and plays a whole legal game."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import chess
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from chessrl.lm.models import build_model, play_game
from pipelines import prepare, sft
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def storage(tmp_path_factory, local_ray, pgn_dir) -> Path:
    root = tmp_path_factory.mktemp("sft")
    code = prepare.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(root),
            "--run-name",
            "s",
            "--no-tracking",
            "--generate",
            "0",
            "--inputs",
            str(pgn_dir / "masters" / "Firouzja.pgn.zst"),
            "--max-games",
            "240",
        ]
    )  # 240 of its 1,876 games: every sft run here packs them all, its legal-move
    # targets ~6 ms a game, and none trains past a few hundred blocks)
    assert code == EXIT_OK
    return root


@pytest.fixture(scope="module")
def few_games(storage, tmp_path_factory) -> Path:
    """The first 40 of those games, a table of their own: the facts format packs every position of
    every game (1,685 blocks for the 240, twice in its test: ~7 s more), and two steps read a few."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    table = pads.dataset(str(storage / "s" / "prepare" / "games"), format="parquet").to_table()
    folder = tmp_path_factory.mktemp("few-games")
    pq.write_table(table.slice(0, 40), folder / "part-0.parquet")
    return folder


def run_sft(storage: Path, *args: str) -> int:
    return sft.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(storage),
            "--run-name",
            "s",
            "--no-tracking",
            "--batch-size",
            "4",
            "--max-length",
            "128",
            "--set",
            "sft.heldout_positions=24",
            *args,
        ]
    )


#: A user's script: AutoTokenizer + AutoModelForCausalLM + generate, no chess-rl import. It prints
#: the first word of the greedy completion of every held-out prompt, without and with a trailing space.
PLAIN_HF = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, positions = sys.argv[1], json.load(open(sys.argv[2]))
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder).eval()
out = {}
for suffix in ("", " "):
    words = []
    for p in positions:
        prompt = " ".join(([p["prefix"]] if p["prefix"] else []) + p["moves_before"]) + suffix
        enc = tok(prompt, return_tensors="pt")
        ids = model.generate(**enc, max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id)
        words.append((tok.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).split() or [""])[0])
    out[suffix] = words
print(json.dumps(out))
"""


def plain_hf_matches_the_phase(phase: Path, phase_rate: float) -> None:
    """The saved model's legal-move rate through plain transformers on the phase's held-out
    positions equals the phase's own held-out figure (within 1 point), with or without a trailing
    space after the last move."""
    positions = json.loads((phase / "heldout.json").read_text())
    assert positions and {"moves_before", "next_move", "prefix"} <= set(positions[0])
    proc = subprocess.run(
        [sys.executable, "-c", PLAIN_HF, str(phase / "model"), str(phase / "heldout.json")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # cwd: the project is not importable
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = json.loads(proc.stdout.strip().splitlines()[-1])
    assert words[""] == words[" "]  # the trailing space changes nothing
    legal = 0
    for p, word in zip(positions, words[""], strict=True):
        board = chess.Board()
        for uci in p["moves_before"]:
            board.push_uci(uci)
        with contextlib.suppress(ValueError):  # not a UCI move at all
            legal += chess.Move.from_uci(word) in board.legal_moves
    # within one position: this barely trained model has near-ties in its logits, and another thread
    # count can flip one of them; a tokenisation mismatch flips many (47% against 86.5% on the demo)
    assert abs(legal - phase_rate * len(positions)) <= 1 + 1e-9, (legal, len(positions), phase_rate)


def test_sft_without_games_is_one_clear_error(tmp_path, capsys, driver_err):
    assert sft.main(["--config", "tiny", "--storage", str(tmp_path), "--no-tracking"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in driver_err(err) and "run `chess-rl prepare` first" in err


def test_board_and_annotation_mistakes_are_one_line_before_ray(tmp_path, capsys, pgn_dir):
    """A block shorter than one board example, annotations for the rookworld format, and annotations
    that are not there: each one line, exit 2, nothing written (the games table is not needed to
    say so: the config is checked first)."""

    def line(*args: str) -> str:
        code = sft.main(["--config", "tiny", "--storage", str(tmp_path), "--no-tracking", *args])
        err = capsys.readouterr().err
        assert code == EXIT_USER_ERROR and "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    said = line("--text-format", "board", "--max-length", "50")
    assert "sft.max_length" in said and "79 or more" in said, said
    said = line("--text-format", "rookworld", "--annotations", str(tmp_path / "annotate"))
    assert "sft.annotations" in said and "--text-format board" in said and "--text-format moves" in said, said
    said = line("--text-format", "board", "--annotations", str(tmp_path / "annotate"))
    assert "sft.annotations" in said and "chess-rl annotate" in said, said
    assert not (tmp_path / "demo").exists()


def test_a_legal_move_loss_weight_for_a_tokenizer_that_splits_moves_is_one_clear_error(
    storage, tmp_path, capsys, driver_err
):
    """Through the command, before Ray: one line, nothing written. (Left unset, the loss is off:
    ``unit/test_lm_data.py``; a moves-format run with the loss off is no longer trained end to end
    here: the rookworld test below trains a BPE model with it off for its format.)"""
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(["e2e4 e7e5 g1f3 b8c6"] * 10, trainer=trainers.BpeTrainer(vocab_size=300))
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    model, _ = build_model("tiny", tokenizer=bpe)
    model.save_pretrained(tmp_path / "bpe")
    bpe.save_pretrained(tmp_path / "bpe")
    games = str(storage / "s" / "prepare" / "games")
    args = ("--run-name", "bpe", "--games", games, "--base-model", str(tmp_path / "bpe"))
    assert run_sft(storage, *args, "--legal-loss-weight", "1", "--max-steps", "1") == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in driver_err(err)
    message = "sft.legal_loss_weight (--legal-loss-weight) is 1.0, but the tokenizer has no single token for"
    assert message in err and "leave it unset or set it to 0 for this model" in err
    assert not (storage / "bpe" / "sft").exists()


def sft_command(storage: Path, games: Path, run: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipelines.sft",
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        run,
        "--no-tracking",
        "--games",
        str(games),
        "--batch-size",
        "4",
        "--max-length",
        "64",
        "--set",
        "sft.heldout_positions=24",
        "--set",
        "ray.num_cpus=1",
        *args,
    ]


def registered_steps(storage: Path, run: str) -> list[int]:
    """Steps of the checkpoints Ray Train has registered for ``run`` (its snapshot file): the ones
    a resumed run may start from. Files on storage run ahead of it: a step takes ~0.1 s here, and
    the controller registers a report when it next polls its workers."""
    steps = []
    for snapshot in (storage / run / "sft" / "ray").glob("*/checkpoint_manager_snapshot.json"):
        try:
            steps += [
                int(r["metrics"]["step"]) for r in json.loads(snapshot.read_text())["checkpoint_results"]
            ]
        except (OSError, ValueError, KeyError):  # being written
            continue
    return sorted(steps)


@pytest.mark.slow
def test_killed_sft_driver_resumes_and_saves_a_playable_model(storage, tmp_path, killed_run):
    """kill -9 of the whole sft job (driver, its embedded Ray, the Train worker) once Ray Train has
    registered a checkpoint; the same command (with another learning rate: it warns first) then
    resumes from the last one it registered, trains to the end, checkpoints and saves a model of
    the plain GPT-2's weights that loads with the Auto classes and plays a whole legal game. One
    sft run, killed and resumed, for both. The compiled path (an eager checkpoint resumed
    compiled, its checkpoints the plain GPT-2's) is ``unit/test_sft_compiled.py``'s: the rerun
    compiled here cost ~50 s more (167 s against 114 s, on a shared 2-CPU machine)."""
    games = storage / "s" / "prepare" / "games"
    command = sft_command(tmp_path, games, "k", "--max-steps", "48", "--eval-every", "4")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    with killed_run(command, env=env) as run:
        run.wait_for(lambda: registered_steps(tmp_path, "k"), timeout=240, poll=0.1)
        assert run.running, "sft ended before it could be killed"
        assert registered_steps(tmp_path, "k"), "no checkpoint registered within 240 s"
    # what the killed run left: Ray's controller runs outside the driver's process group and may
    # register one more checkpoint before it notices its raylet is gone, so read it once it is still
    registered, stable = registered_steps(tmp_path, "k"), time.monotonic() + 15
    while time.monotonic() < stable:
        time.sleep(1.5)
        if (again := registered_steps(tmp_path, "k")) == registered:
            break
        registered = again
    assert registered[-1] < 48 and not (tmp_path / "k" / "sft" / "summary.json").exists()

    # the same command with another learning rate: it resumes all the same, and says so first
    rerun = subprocess.run(
        [*command, "--learning-rate", "0.001"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    changed = "(sft.learning_rate 0.003 -> 0.001)"
    assert f"was written by a run with another config {changed}" in rerun.stderr
    phase = tmp_path / "k" / "sft"
    summary = json.loads((phase / "summary.json").read_text())
    assert summary["steps"] == 48 and summary["heldout_positions"] == 24
    assert summary["resumed_from_step"] == registered[-1] > 0
    assert f"resumed from step {summary['resumed_from_step']}" in rerun.stdout
    # the embedded Ray's workers keep Ray Train's placement-group cleaner quiet: without a state
    # API it would warn once a second for the whole run
    assert "Failed to query Ray Train Controller actor state" not in rerun.stderr

    out = rerun.stdout
    assert "sft summary" in out and "legal-move rate" in out
    assert 0.0 <= summary["heldout_legal_rate"] <= 1.0
    assert 0.0 <= summary["padding_fraction"] < 0.2 and summary["truncated_games"] >= 0
    # the resumed run checkpointed (to its last step)
    assert registered_steps(tmp_path, "k")[-1] == 48
    assert list((phase / "ray").glob("*/checkpoint_*"))
    # the legal-move loss is on by default for the chess tokenizer; the worker reports the legal
    # moves' share of the probability
    assert summary["legal_loss_weight"] == 1.0 and 0.0 < summary["legal_mass"] < 1.0
    assert "legal moves get" in out

    # the checkpoint and saved model hold the plain GPT-2's weights (a compiled run's too:
    # unit/test_sft_compiled.py), so any run resumes from it
    model_dir = phase / "model"
    checkpoint = max((phase / "ray").glob("*/checkpoint_*/checkpoint/model.safetensors"))
    build_model("tiny")[0].save_pretrained(tmp_path / "fresh")
    with safe_open(tmp_path / "fresh" / "model.safetensors", "pt") as fresh:
        for saved_file in (model_dir / "model.safetensors", checkpoint):
            with safe_open(saved_file, "pt") as saved:
                assert set(saved.keys()) == set(fresh.keys()), saved_file
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    game = play_game(model, tokenizer, max_plies=30, seed=2)
    board = chess.Board()
    for uci in game.moves:
        assert chess.Move.from_uci(uci) in board.legal_moves
        board.push_uci(uci)
    assert game.attempts.total >= len(game.moves)
    # ... and plain transformers, with no project code, reads a prompt as the phase measured it
    plain_hf_matches_the_phase(phase, summary["heldout_legal_rate"])


def test_rookworld_format_from_a_rookworld_lm_style_checkpoint(storage, tmp_path, capsys):
    """A user checkpoint laid out like RookWorld-LM-124M: GPT-2 weights and a byte-level BPE with
    ``<|endoftext|>`` in one folder. ``--text-format rookworld`` trains it on the policy and
    environment tasks, writes ``sft-rookworld/`` and marks the model's format."""
    import random

    from chessrl.lm.lm_data import rookworld_texts

    texts = rookworld_texts(
        ["e2e4", "e7e5", "g1f3", "b8c6", "f1b5", "a7a6", "b5a4", "g8f6"],
        8,
        env_share=0.5,
        rng=random.Random(0),
    )
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts * 5, trainer=trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"])
    )
    bpe = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", bos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    model, _ = build_model("tiny", tokenizer=bpe)
    folder = tmp_path / "rookworld-lm"
    model.save_pretrained(folder)
    bpe.save_pretrained(folder)
    games = str(storage / "s" / "prepare" / "games")
    code = run_sft(
        storage,
        "--run-name",
        "rw",
        "--games",
        games,
        "--base-model",
        str(folder),
        "--text-format",
        "rookworld",
        "--max-steps",
        "1",
        "--eval-every",
        "1",
        "--max-length",
        "256",
    )
    assert code == EXIT_OK
    assert "legal-move loss off" in capsys.readouterr().err
    out = storage / "rw" / "sft-rookworld"
    assert json.loads((out / "model" / "config.json").read_text())["chessrl_text_format"] == "rookworld"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["resumed_from_step"] == 0
    assert 0.0 <= summary["heldout_legal_rate"] <= 1.0 and not (storage / "rw" / "sft").exists()


def test_facts_format_refuses_a_block_shorter_than_its_longest_prompt_then_trains(
    storage, few_games, capsys, driver_err
):
    """``--text-format facts``: a block shorter than the longest facts prompt of the games is one
    line naming the length (nothing cut silently); at that length it trains, writes ``sft-facts/``,
    marks the model's format, and plain transformers (AutoTokenizer + generate on the facts
    prompt) answers the held-out positions as the phase measured them."""
    import re

    from chessrl.lm.formats import FactsFormat

    games = str(few_games)
    args = (
        "--run-name",
        "facts",
        "--games",
        games,
        "--text-format",
        "facts",
        "--max-steps",
        "2",
        "--eval-every",
        "2",
    )
    # 230 holds the board and control rows of any position, not the games' longest move list
    assert run_sft(storage, *args, "--max-length", "230") == EXIT_USER_ERROR
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in driver_err(err) and "sft.max_length (--max-length) is 230" in line, line
    need = int(re.search(r"use (\d+) or more", line).group(1))  # type: ignore[union-attr]
    assert 230 < need <= 512 and not (storage / "facts" / "sft-facts" / "model").exists()

    assert run_sft(storage, *args, "--max-length", str(need)) == EXIT_OK
    out = storage / "facts" / "sft-facts"
    assert json.loads((out / "model" / "config.json").read_text())["chessrl_text_format"] == "facts"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["truncated_games"] == 0
    tok = AutoTokenizer.from_pretrained(out / "model")
    model = AutoModelForCausalLM.from_pretrained(out / "model").eval()
    legal = 0
    for p in json.loads((out / "heldout.json").read_text()):
        board = chess.Board()
        for uci in p["moves_before"]:
            board.push_uci(uci)
        enc = tok(FactsFormat().policy_prompt(board), return_tensors="pt")
        ids = model.generate(**enc, max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id)
        word = (tok.decode(ids[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).split() or [""])[0]
        with contextlib.suppress(ValueError):
            legal += chess.Move.from_uci(word) in board.legal_moves
    assert abs(legal - summary["heldout_legal_rate"] * summary["heldout_positions"]) <= 1 + 1e-9


def test_use_gpu_on_a_cluster_without_one_is_one_line_not_a_wait(storage, capsys, driver_err):
    """Ray Train would wait for a GPU forever, its controller retrying each minute: the phase
    says at once what the cluster has and which torch runs here, exit 2."""
    games = str(storage / "s" / "prepare" / "games")
    assert (
        run_sft(storage, "--run-name", "gpu", "--games", games, "--use-gpu", "--max-steps", "1")
        == EXIT_USER_ERROR
    )
    err = capsys.readouterr().err
    assert "Traceback" not in driver_err(err)
    said = err.strip().splitlines()[-1]
    assert "sft.use_gpu (--use-gpu)" in said and "need a GPU each, but this Ray cluster has 0" in said, said
    assert "torch" in said and "leave use_gpu off" in said, said
