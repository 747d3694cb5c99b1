"""grpo: bad input is one clear message (exit 2, one ``error:`` line naming the key or flag and
what is wrong) before any work; a start policy that never learned the rookworld tasks is a
warning in the log, not an error."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.errors import ConfigError
from pipelines import grpo
from pipelines.common.artifacts import mark_text_format
from pipelines.common.phase import EXIT_USER_ERROR


def test_grpo_bad_input_is_one_clear_message(tmp_path, tiny_lm_dir, capsys, monkeypatch):
    games = tmp_path / "games"
    games.mkdir()
    pq.write_table(pa.table({"game_id": ["a" * 16], "moves": ["e2e4 e7e5 g1f3"]}), games / "part-0.parquet")
    storage = tmp_path / "runs"

    def run(*args: str) -> str:
        code = grpo.main(
            [
                "--config",
                "tiny",
                "--storage",
                str(storage),
                "--run-name",
                "bad",
                "--no-tracking",
                "--policy",
                str(tiny_lm_dir),
                "--games",
                str(games),
                *args,
            ]
        )
        err = capsys.readouterr().err
        assert code == EXIT_USER_ERROR, err
        assert "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    line = run("--group-size", "1")
    assert line.startswith("error: ") and "grpo.group_size" in line, line
    line = run("--policy-share", "1.5")
    assert "grpo.policy_share" in line, line
    line = run("--policy-share", "-0.1")
    assert "grpo.policy_share" in line, line
    line = run("--text-format", "moves", "--policy-share", "0.8")  # the moves format has no environment task
    assert "grpo.policy_share" in line and "moves format" in line, line
    line = run("--dead-zone", "0.5")  # a dead zone as wide as max_loss would call every move the best
    assert "dead_zone" in line and "max_loss" in line, line
    line = run("--dead-zone", "1.5")
    assert "grpo.dead_zone" in line, line
    line = run("--loss-type", "dpo", "--dpo-beta", "0")  # online DPO's beta is the reference's pull
    assert "grpo.dpo_beta" in line, line
    line = run("--loss-type", "dpo", "--pair-margin", "-0.1")
    assert "grpo.pair_margin" in line, line
    line = run("--no-masked")  # the preset's own positions are played with masked moves
    assert "grpo.own_positions" in line and "--masked" in line, line
    line = run("--own-positions", "1.5")
    assert "grpo.own_positions" in line, line
    line = run("--own-opponent", "stockfish")
    assert "grpo.own_opponent" in line and "random+start" in line, line
    line = run("--text-format", "fen")
    assert "grpo.text_format" in line and "rookworld" in line and "moves" in line, line
    monkeypatch.setenv("STOCKFISH_PATH", str(tmp_path / "no-stockfish"))
    line = run()
    assert "STOCKFISH_PATH" in line and "not an executable file" in line, line
    monkeypatch.delenv("STOCKFISH_PATH")
    line = run("--policy", str(tmp_path / "nowhere"))
    assert "grpo.policy" in line and "config.json" in line, line
    line = run("--prompts-per-iteration", "2", "--num-workers", "3")  # a worker with no prompt
    assert "grpo.prompts_per_iteration" in line and "grpo.num_workers" in line, line
    line = run("--use-gpu")  # a GPU this cluster does not have: one line, not a wait for one
    assert "grpo.use_gpu (--use-gpu)" in line and "but this Ray cluster has 0" in line, line
    assert not (storage / "bad" / "grpo" / "prompts.json").exists()  # nothing planned or written


def test_policy_without_rookworld_markers_is_a_warning(tiny_lm_dir):
    said: list[str] = []
    facts = grpo.check_policy(str(tiny_lm_dir), said.append)
    assert facts["text_format"] is None and facts["move_tokens"] == 2
    assert len(said) == 1 and said[0].startswith("warning:") and "--text-format rookworld" in said[0]


def test_missing_default_policy_names_the_command(tmp_path, capsys):
    code = grpo.main(["--config", "tiny", "--storage", str(tmp_path), "--run-name", "none", "--no-tracking"])
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR
    line = err.strip().splitlines()[-1]
    assert "sft-board" in line and "chess-rl sft --text-format board" in line, line  # the preset's format
    code = grpo.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(tmp_path),
            "--run-name",
            "none",
            "--no-tracking",
            "--text-format",
            "rookworld",
        ]
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "sft-rookworld" in line and "chess-rl sft --text-format rookworld" in line, line
    code = grpo.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(tmp_path),
            "--run-name",
            "none",
            "--no-tracking",
            "--text-format",
            "moves",
            "--policy-share",
            "1",
        ]
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == EXIT_USER_ERROR and "none/sft" in line and "`chess-rl sft`" in line, line


def test_moves_policy_is_asked_in_its_own_format_without_a_warning(tiny_lm_dir):
    said: list[str] = []
    facts = grpo.check_policy(str(tiny_lm_dir), said.append, "moves")
    assert said == [] and facts["move_tokens"] == 2


def test_masked_with_a_tokenizer_that_splits_moves_is_one_line(tmp_path, capsys):
    """grpo --masked and an evaluate player ``lm:DIR,masked`` need one token per move: a BPE
    model is refused before Ray, naming the key and what to use instead."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from chessrl.lm.models import build_model
    from pipelines import evaluate

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.train_from_iterator(["e2e4 e7e5 g1f3 b8c6"] * 10, trainer=trainers.BpeTrainer(vocab_size=300))
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    model, _ = build_model("tiny", tokenizer=bpe)
    model.save_pretrained(tmp_path / "bpe")
    bpe.save_pretrained(tmp_path / "bpe")
    common = ["--config", "tiny", "--storage", str(tmp_path / "runs"), "--run-name", "m", "--no-tracking"]
    code = grpo.main([*common, "--policy", str(tmp_path / "bpe"), "--games", str(tmp_path / "bpe")])
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert code == EXIT_USER_ERROR and "Traceback" not in err, err
    assert line.startswith("error: grpo.masked (--masked)") and "one token per move" in line, line
    code = evaluate.main([*common, "--players", f"lm:{tmp_path / 'bpe'},masked", "random", "--suites"])
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert code == EXIT_USER_ERROR and "Traceback" not in err, err
    assert "evaluate.players" in line and ",masked" in line and "one token per move" in line, line
    from pipelines import uci  # the UCI engine plays masked by default: refused before its handshake

    assert uci.main(["--model", str(tmp_path / "bpe")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: --model {tmp_path / 'bpe'}: ") and line.endswith(
        "pass --unmasked to play its own checked proposals"
    ), line


def test_a_policy_asked_in_the_other_of_moves_and_board_is_an_error(tmp_path, tiny_lm_dir):
    """The tiny preset says board (its graph's sft-board start); a --policy trained on moves (a
    distilled `sft --text-format moves --annotations` model) asked in it would read prompts it
    never saw: one line naming the flag to pass."""
    policy = shutil.copytree(tiny_lm_dir, tmp_path / "moves-policy")
    mark_text_format(policy, "moves")
    with pytest.raises(
        ConfigError, match=r"grpo.text_format \(--text-format\) is board.*pass --text-format moves"
    ):
        grpo.check_policy(str(policy), print, "board")
    assert grpo.check_policy(str(policy), print, "moves")["text_format"] == "moves"
