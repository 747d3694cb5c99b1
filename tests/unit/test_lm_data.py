"""Training data for the language models: the held-out split is stable and disjoint, and packing
keeps every token in order with no padding."""

from __future__ import annotations

import hashlib

import pytest

from chessrl.lm_data import is_heldout, pack_blocks, result_prefix, split_games, training_text
from chessrl.tokenizer import build_chess_tokenizer


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


def test_packing_keeps_every_token_in_order_and_drops_only_the_tail() -> None:
    seqs = [[1, *range(10 * k, 10 * k + k), 2] for k in range(1, 30)]
    stream = [t for s in seqs for t in s]
    blocks = pack_blocks(seqs, 16)
    assert all(len(b) == 16 for b in blocks)
    assert [t for b in blocks for t in b] == stream[: 16 * len(blocks)]
    assert len(stream) - 16 * len(blocks) < 16
    assert pack_blocks([[1, 2]], 16) == []
    with pytest.raises(ValueError, match="block"):
        pack_blocks(seqs, 0)


def test_a_game_costs_one_token_per_move() -> None:
    tok = build_chess_tokenizer()
    moves = "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6 e1g1"
    text = training_text(moves, "1-0", condition_on_result=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1 + 9 and tok.decode(ids) == text
    assert result_prefix("*", True) == "" and result_prefix("0-1", False) == ""
