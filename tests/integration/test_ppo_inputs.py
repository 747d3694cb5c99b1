"""ppo: bad input is one clear message (exit 2, one ``error:`` line naming the key or flag and
what is wrong), and every case fails in the driver before any actor or training starts."""

from __future__ import annotations

import shutil
from pathlib import Path

from chessrl.lm.checkpoints import load_tokenizer
from chessrl.rl.reward import build_reward_model
from pipelines import ppo
from pipelines.common.artifacts import mark_text_format
from pipelines.common.phase import EXIT_USER_ERROR


def save_reward_model(folder: Path, tokenizer, extra_tokens: list[str] | None = None) -> Path:
    """A randomly initialised tiny reward model on ``tokenizer`` (plus ``extra_tokens``), saved."""
    model, tok = build_reward_model("tiny", tokenizer)
    if extra_tokens:
        tok.add_tokens(extra_tokens)
        model.resize_token_embeddings(len(tok))
    folder.mkdir()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_ppo_bad_input_is_one_clear_message(tmp_path, tiny_lm_dir, capsys):
    def run(*args: str) -> str:
        code = ppo.main(
            # the reward-model path, each move a state (the tiny preset's is the board sft graded by Stockfish)
            [
                "--config",
                "tiny",
                "--storage",
                str(tmp_path),
                "--run-name",
                "bad",
                "--no-tracking",
                "--reward",
                "model",
                "--text-format",
                "moves",
                "--samples-per-state",
                "1",
                "--table-positions",
                "0",
                *args,
            ]
        )
        err = capsys.readouterr().err
        assert code == EXIT_USER_ERROR, err
        assert "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    policy = ("--policy", str(tiny_lm_dir))
    reward_ok = save_reward_model(tmp_path / "rm-ok", load_tokenizer(str(tiny_lm_dir)))
    reward_other = save_reward_model(
        tmp_path / "rm-other", load_tokenizer(str(tiny_lm_dir)), ["<not-a-move-1>", "<not-a-move-2>"]
    )
    models = (*policy, "--reward-model", str(reward_ok))

    # a board ppo with no --policy starts from the run's board sft, which is not there
    line = run("--reward", "stockfish", "--text-format", "board")
    assert "sft-board/model" in line and "chess-rl sft --text-format board" in line and "--policy" in line, (
        line
    )
    # table positions with no games table to take them from
    line = run(*policy, "--reward", "stockfish", "--table-positions", "0.5")
    assert "ppo.table_positions" in line and "no games table" in line and "--games" in line, line
    # no reward model in the run and no --reward-model
    line = run(*policy)
    assert line.startswith("error: ") and "chess-rl reward" in line and "--reward-model" in line, line
    # a reward model whose tokenizer is not the policy's
    line = run(*policy, "--reward-model", str(reward_other))
    assert "ppo.reward_model" in line and "tokenizer" in line and "not the policy's" in line, line
    # a causal LM (with the right tokenizer) passed as the reward model
    line = run(*policy, "--reward-model", str(tiny_lm_dir))
    assert "ppo.reward_model" in line and "needs a reward model (GPT2ForSequenceClassification)" in line, line
    # beta < 0
    line = run(*models, "--kl-coef", "-0.1")
    assert "ppo.kl_coef" in line, line
    # an opponent outside the pool's syntax
    line = run(*models, "--opponents", "self", "alphazero")
    assert "ppo.opponents" in line and "alphazero" in line, line
    assert all(word in line.split("allowed:")[-1] for word in ("self", "random", "stockfish")), line
    # T < 1
    line = run(*models, "--max-actions", "0")
    assert "ppo.max_actions" in line, line
    # start plies + T that do not fit in the policy's context
    line = run(*models, "--max-start-ply", "5000")
    assert "--max-start-ply" in line and "context" in line, line
    # more learner workers than an iteration has episodes
    line = run(*models, "--episodes-per-iteration", "2", "--num-workers", "3")
    assert "ppo.episodes_per_iteration" in line and "ppo.num_workers" in line, line
    # GPUs this cluster does not have: one line, not a wait for them
    line = run(*models, "--reward-server-gpus", "0.5", "--reward-servers", "2")
    assert "ppo.reward_server_gpus" in line and "need 0.5 GPU each, but this Ray cluster has 0" in line, line
    line = run(*models, "--use-gpu", "--num-workers", "2")
    assert "ppo.use_gpu (--use-gpu)" in line and "2 worker(s) need a GPU each" in line, line
    # Stockfish grading: no reward model needed, but a dead zone as wide as max_loss calls every move the best
    line = run(*policy, "--reward", "stockfish", "--dead-zone", "0.5")
    assert "ppo.dead_zone" in line and "ppo.max_loss" in line, line
    line = run(*policy, "--reward", "engine")
    assert "ppo.reward" in line and "stockfish" in line, line
    # several moves a position: only masked (each drawn move legal), only at gamma 0 (no continuation)
    line = run(*policy, "--reward", "stockfish", "--samples-per-state", "4", "--no-masked")
    assert "ppo.samples_per_state" in line and "ppo.masked" in line, line
    line = run(*policy, "--reward", "stockfish", "--samples-per-state", "4", "--gamma", "0.5")
    assert "ppo.samples_per_state" in line and "ppo.gamma" in line, line
    line = run(*policy, "--reward", "stockfish", "--anchor-coef", "0.2")
    assert "ppo.anchor_coef" in line and "ppo.samples_per_state" in line, line
    line = run(*policy, "--reward", "stockfish", "--text-format", "fen")
    assert "ppo.text_format" in line and "board" in line, line
    # a policy trained on the moves format asked in the board format (the tiny preset's, for its graph)
    moves_policy = shutil.copytree(tiny_lm_dir, tmp_path / "moves-policy")
    mark_text_format(moves_policy, "moves")
    line = run("--policy", str(moves_policy), "--reward", "stockfish", "--text-format", "board")
    assert "ppo.text_format (--text-format) is board" in line and "trained on the moves format" in line, line
    assert "pass --text-format moves" in line, line
    # nothing started: no phase output, no rollouts
    assert not (tmp_path / "bad" / "ppo").exists()


def test_episodes_start_in_training_games_only(tmp_path):
    """The held-out games, whose positions the paired quality is measured on, are never a start."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq

    from chessrl.lm.lm_data import is_heldout
    from pipelines.config import ChessRLConfig

    ids = [f"{i:016x}" for i in range(0, 2**64 - 1, 2**58)][:64]  # spread over the hash space
    games = tmp_path / "games"
    games.mkdir()
    pq.write_table(
        pa.table({"game_id": ids, "moves": [f"e2e4 e7e5 g1f3 g{i}" for i in range(64)]}),
        games / "part-0.parquet",
    )
    config = ChessRLConfig()
    config.sft.heldout_fraction = 0.25
    pool = ppo.start_pool(SimpleNamespace(config=config), config.ppo.model_copy(update={"games": str(games)}))
    held = {f"g{i}" for i, game_id in enumerate(ids) if is_heldout(game_id, 0.25)}
    assert held and len(pool) == 64 - len(held)
    assert not held & {moves[3] for moves in pool}
