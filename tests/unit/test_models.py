"""Model presets, save/load through transformers' Auto classes, and legal play (CPU, no Ray)."""

from __future__ import annotations

import chess
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from chessrl.lm.checkpoints import ModelLoadError, load_pretrained
from chessrl.lm.models import build_model, count_parameters, cpu_has_bf16_matmul, play_game, set_dropout


def replay(moves: list[str]) -> chess.Board:
    board = chess.Board()
    for uci in moves:
        move = chess.Move.from_uci(uci)
        assert move in board.legal_moves, (board.fen(), uci)
        board.push(move)
    return board


@pytest.mark.parametrize(("preset", "low", "high"), [("tiny", 1e6, 4e6), ("small", 20e6, 30e6)])
def test_presets_have_the_sizes_the_design_names(preset, low, high) -> None:
    model, tok = build_model(preset)
    assert low <= count_parameters(model) <= high
    assert model.config.vocab_size == len(tok) and model.config.eos_token_id == tok.eos_token_id


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(ValueError, match="unknown model preset 'huge'; presets: tiny, small, base"):
        build_model("huge")


def test_saved_model_loads_with_auto_classes_and_through_load_pretrained(tmp_path) -> None:
    model, tok = build_model("tiny")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    auto_model = AutoModelForCausalLM.from_pretrained(tmp_path)
    model.eval()
    auto_tok = AutoTokenizer.from_pretrained(tmp_path)
    ids = torch.tensor([auto_tok("e2e4 e7e5")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, auto_model(ids).logits, atol=1e-6)
    loaded, loaded_tok = load_pretrained(str(tmp_path))
    assert count_parameters(loaded) == count_parameters(model) and len(loaded_tok) == len(tok)
    loaded_uri, _ = load_pretrained(f"file://{tmp_path}")
    assert count_parameters(loaded_uri) == count_parameters(model)


def test_a_loaded_model_plays_a_whole_legal_game(tmp_path) -> None:
    model, tok = build_model("tiny")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = load_pretrained(str(tmp_path))
    game = play_game(loaded, loaded_tok, max_plies=40, seed=3)
    board = replay(game.moves)
    assert len(game.moves) == 40 or board.is_game_over(claim_draw=True)
    assert game.attempts.total >= len(game.moves)  # every move was asked of the model first
    assert 0 <= game.fallbacks <= len(game.moves)


def test_any_tokenizer_works_a_byte_level_bpe(tmp_path) -> None:
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        ["e2e4 e7e5 g1f3 b8c6 f1b5 a7a6", "d2d4 d7d5 c2c4 e7e6 b1c3 g8f6"],
        trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False),
    )
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    model, _ = build_model("tiny", tokenizer=bpe)
    game = play_game(model, bpe, max_plies=10, seed=1)
    replay(game.moves)
    assert len(game.moves) == 10


def test_a_folder_that_is_not_a_checkpoint_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"junk")
    with pytest.raises(ModelLoadError, match="is not a transformers checkpoint folder"):
        load_pretrained(str(tmp_path))


def test_presets_train_without_dropout_and_set_dropout_turns_it_on_and_is_saved(tmp_path) -> None:
    model, tok = build_model("tiny")
    model.train()
    ids = torch.tensor([tok("e2e4 e7e5 g1f3")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids).logits)  # no random masks
        assert set_dropout(model, 0.5) > 0
        assert not torch.equal(model(ids).logits, model(ids).logits)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert (loaded.config.resid_pdrop, loaded.config.attn_pdrop, loaded.config.embd_pdrop) == (0.5, 0.5, 0.5)
    assert {m.p for m in loaded.modules() if isinstance(m, torch.nn.Dropout)} == {0.5}
    with pytest.raises(ValueError, match="dropout must be in"):
        set_dropout(model, 1.0)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu sse avx2 avx512f amx_bf16 amx_tile", True),
        ("fpu avx512f avx512_bf16", True),
        ("fp asimd bf16 i8mm", True),
        ("fpu sse avx2 avx512f", False),
    ],
)
def test_bf16_matmul_is_read_from_the_cpu_flags(tmp_path, flags, expected) -> None:
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert cpu_has_bf16_matmul(tmp_path / "cpuinfo") is expected
    assert cpu_has_bf16_matmul(tmp_path / "missing") is False


def test_batched_proposals_equal_one_prompt_at_a_time() -> None:
    """Left padding changes nothing: greedy completions of a batch of prompts of different
    lengths are those of each prompt alone; sampling gives n completions a prompt."""
    from chessrl.lm.models import propose_moves, propose_moves_batch

    model, tok = build_model("tiny")
    prompts = ["", "e2e4", "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4", "d2d4 d7d5 c2c4"]
    assert propose_moves_batch(model, tok, prompts, temperature=0) == [
        propose_moves(model, tok, p) for p in prompts
    ]
    sampled = propose_moves_batch(model, tok, prompts, n=3, temperature=1.0)
    assert [len(c) for c in sampled] == [3] * 4 and propose_moves_batch(model, tok, []) == []
