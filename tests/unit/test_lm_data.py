"""Training data for the language models: the held-out split is stable and disjoint, and packing
keeps every game whole, each block starting at a game, with the padding not a target."""

from __future__ import annotations

import hashlib

import pytest

from chessrl.lm.lm_data import is_heldout, pack_games, result_prefix, split_games, training_text
from chessrl.lm.tokenizer import build_chess_tokenizer


def test_heldout_split_is_stable_and_near_the_fraction() -> None:
    ids = [hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest() for i in range(20_000)]
    held = [i for i in ids if is_heldout(i, 0.05)]
    assert 0.04 < len(held) / len(ids) < 0.06
    assert held == [i for i in ids if is_heldout(i, 0.05)]
    assert set(held) <= {i for i in ids if is_heldout(i, 0.10)}  # a larger fraction only adds games


def test_split_keeps_each_game_once_on_one_side() -> None:
    ids = [hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest() for i in range(2_000)]
    rows = [{"game_id": i, "copy": 0} for i in ids] + [{"game_id": i, "copy": 1} for i in ids[::3]]
    train, held, dropped = split_games(rows, 0.1)
    assert dropped == len(ids[::3])
    assert sorted(r["game_id"] for r in train + held) == sorted(ids)  # every game, once
    assert {r["game_id"] for r in held} == {i for i in ids if is_heldout(i, 0.1)}
    assert all(r["copy"] == 0 for r in train + held)  # the first copy read is the one kept


def test_packing_keeps_every_game_whole_and_each_block_starts_a_game() -> None:
    # games <bos>=1 ... <eos>=2 with distinct move tokens, 3 to 19 tokens long
    seqs = [[1, *range(100 * k, 100 * k + k), 2] for k in range(1, 18)] * 3
    blocks, truncated = pack_games(seqs, 24)
    assert truncated == 0
    assert all(0 < len(b) <= 24 and b[0] == 1 for b in blocks)
    # cut each block at its <bos> tokens: exactly the games, each once, none split
    games = []
    for b in blocks:
        starts = [i for i, t in enumerate(b) if t == 1] + [len(b)]
        games += [b[i:j] for i, j in zip(starts, starts[1:], strict=False)]
    assert sorted(games) == sorted(seqs)
    # first-fit-decreasing wastes little: within one block's worth of the ideal
    assert len(blocks) * 24 - sum(map(len, seqs)) < 24 * 2


def test_a_game_longer_than_a_block_keeps_its_start_and_is_counted() -> None:
    blocks, truncated = pack_games([[1, *range(10, 40), 2], [1, 5, 2]], 8)
    assert truncated == 1
    assert [1, 10, 11, 12, 13, 14, 15, 16] in blocks
    assert [1, 5, 2] in blocks
    assert pack_games([], 8) == ([], 0)
    with pytest.raises(ValueError, match="block"):
        pack_games([[1, 2]], 0)


def test_a_game_costs_one_token_per_move() -> None:
    tok = build_chess_tokenizer()
    moves = "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6 e1g1"
    text = training_text(moves, "1-0", condition_on_result=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1 + 9 and tok.decode(ids) == text
    assert result_prefix("*", True) == "" and result_prefix("0-1", False) == ""


def test_the_sft_packing_stage_pads_whole_game_blocks_and_counts_their_tokens() -> None:
    from pipelines.sft_data import tokenize_and_pack

    tok = build_chess_tokenizer()
    games = ["e2e4 e7e5 g1f3", "d2d4 d7d5", "c2c4 " * 20]
    out = tokenize_and_pack({"text": games}, tok, block=16)
    rows, lengths = out["input_ids"], out["length"]
    assert rows.shape[1] == 16 and len(rows) == len(lengths)
    assert int(out["truncated"].sum()) == 1  # the 20-move game does not fit in 16 tokens
    assert int(out["longest"].max()) == 22  # and says how long it was: <bos>, 20 moves, <eos>
    for row, length in zip(rows, lengths, strict=True):
        assert row[0] == tok.bos_token_id
        assert all(t == tok.pad_token_id for t in row[length:])
        assert tok.pad_token_id not in row[:length]
    real = sorted(tok.decode(row[:length]) for row, length in zip(rows, lengths, strict=True))
    assert any(
        "e2e4 e7e5 g1f3" in text and "d2d4 d7d5" in text for text in real
    )  # 5 + 4 tokens share a block


@pytest.mark.parametrize("text_format", ["board", "facts"])
def test_board_texts_are_learnt_on_their_answers_alone(text_format: str) -> None:
    """The board (and facts) format's loss is on the move (and <eos>) after each ``M:``, not on
    the squares (nor the facts' moves), in every text of a packed block."""
    import chess

    from chessrl.lm.formats import get_format
    from pipelines.sft_data import answer_token, tokenize_and_pack

    tok, fmt = build_chess_tokenizer(), get_format(text_format)
    board, texts = chess.Board(), []
    for move in ("e2e4", "e7e5", "g1f3"):
        texts.append(fmt.policy_text(board, move))  # type: ignore[union-attr]
        board.push_uci(move)
    out = tokenize_and_pack({"text": texts}, tok, block=1024, answer_after=answer_token(tok))
    [row], [marks] = out["input_ids"], out["targets"]
    kept = [tok.convert_ids_to_tokens(int(t)) for t, m in zip(row, marks, strict=True) if m]
    assert sorted(kept) == sorted([" e2e4", " e7e5", " g1f3"] + [tok.eos_token] * 3)
    assert "targets" not in tokenize_and_pack({"text": texts}, tok, block=512)


def test_the_legal_move_loss_weight_defaults_to_one_and_an_explicit_weight_is_kept() -> None:
    from pipelines.config import SftConfig
    from pipelines.sft import legal_move_tokens

    tok, said = build_chess_tokenizer(), []
    moves, weight = legal_move_tokens(SftConfig(), tok, said.append)
    assert moves is not None and weight == 1.0
    assert legal_move_tokens(SftConfig(legal_loss_weight=0.5), tok, said.append)[1] == 0.5
    assert legal_move_tokens(SftConfig(legal_loss_weight=0), tok, said.append) == (None, 0.0)
    assert said == []


def test_the_legal_move_loss_is_off_for_a_tokenizer_that_splits_moves_and_a_weight_for_it_is_refused() -> (
    None
):
    """A BPE that spells a move in pieces: left unset, the loss is off and the log says why; a
    weight asked for is one ConfigError (``sft --legal-loss-weight 1`` with such a base model)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cluster.errors import ConfigError
    from pipelines.config import SftConfig
    from pipelines.sft import legal_move_tokens

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(["e2e4 e7e5 g1f3 b8c6"] * 10, trainer=trainers.BpeTrainer(vocab_size=300))
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    said: list[str] = []
    assert legal_move_tokens(SftConfig(), bpe, said.append) == (None, 0.0)
    assert len(said) == 1 and said[0].startswith("legal-move loss off: the tokenizer has no single token for")
    with pytest.raises(ConfigError, match="is 1.0, but the tokenizer has no single token for .* set it to 0"):
        legal_move_tokens(SftConfig(legal_loss_weight=1), bpe, said.append)
