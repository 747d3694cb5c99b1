"""The legal-move loss: legal-move targets of packed game blocks checked against python-chess on
real games, special moves, prefixes, corrupt games, other tokenizers, and the loss itself."""

from __future__ import annotations

import chess
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from chessrl.data.pgn import read_pgn_file
from chessrl.lm.legality import MoveTokens, legal_move_loss, legal_move_targets, pad_legal_targets
from chessrl.lm.lm_data import pack_games, training_text
from chessrl.lm.tokenizer import build_chess_tokenizer


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return build_chess_tokenizer()


@pytest.fixture(scope="module")
def moves(tok) -> MoveTokens:
    return MoveTokens(tok)


@pytest.fixture(scope="module")
def games(pgn_dir) -> list[list[str]]:
    with open(pgn_dir / "lichess-2021-10-sample.pgn", "rb") as handle:
        records, _ = read_pgn_file(handle, "lichess")
    return [r.moves.split() for r in records[:40]]


def encode(tok, text: str) -> list[int]:
    return [tok.bos_token_id, *tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]


def per_position(flat: list[int], counts: list[int]) -> list[list[int]]:
    out, at = [], 0
    for n in counts:
        out.append(flat[at : at + n])
        at += n
    assert at == len(flat)
    return out


def test_targets_are_exactly_the_legal_moves_of_every_position_in_packed_real_games(
    tok, moves, games
) -> None:
    blocks, _ = pack_games([encode(tok, training_text(" ".join(g), None)) for g in games], block=512)
    assert any(block.count(tok.bos_token_id) > 1 for block in blocks)  # several games share a block
    checked = 0
    for block in blocks:
        ids = block + [tok.pad_token_id] * 7  # padding after the last game has no targets
        targets = per_position(*legal_move_targets(ids, moves, tok.bos_token_id))
        board = chess.Board()
        for t in range(len(ids) - 1):
            token = tok.convert_ids_to_tokens(ids[t])
            if ids[t] == tok.bos_token_id:
                board.reset()
            elif token.strip() and ids[t] not in (tok.eos_token_id, tok.pad_token_id):
                board.push_uci(token.strip())
            nxt = tok.convert_ids_to_tokens(ids[t + 1])
            if ids[t + 1] in (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id):
                assert targets[t] == []
                continue
            space = " " if nxt.startswith(" ") else ""
            expected = sorted(tok.convert_tokens_to_ids(space + m.uci()) for m in board.legal_moves)
            assert sorted(targets[t]) == expected
            assert ids[t + 1] in targets[t]  # the game's move is one of them
            checked += 1
    assert checked == sum(len(g) for g in games)


def test_castling_en_passant_and_promotion_are_among_the_targets(tok, moves) -> None:
    # e5xd6 en passant (ply 4), white castles short (ply 10), the pawn promotes taking on d8 (ply 14)
    game = "e2e4 a7a6 e4e5 d7d5 e5d6 b8c6 g1f3 h7h6 f1e2 g7g6 e1g1 a6a5 d6e7 a5a4 e7d8q"
    ids = encode(tok, game)
    targets = per_position(*legal_move_targets(ids, moves, tok.bos_token_id))
    names = [set(tok.convert_ids_to_tokens(t)) for t in targets]
    assert " e5d6" in names[4] and " e1g1" in names[10]
    assert {" e7d8q", " e7d8r", " e7d8b", " e7d8n", " e7f8q"} <= names[14] and " e7e8q" not in names[14]
    assert "e2e4" in names[0] and " e2e4" not in names[0]  # the first move carries no space


def test_a_result_prefix_leaves_the_board_alone(tok, moves) -> None:
    ids = encode(tok, training_text("e2e4 e7e5", "1-0", condition_on_result=True))
    counts = legal_move_targets(ids, moves, tok.bos_token_id)[1]
    assert counts == [0, 20, 20, 0, 0]  # <bos> is followed by "1-0", not a move


def test_an_illegal_move_ends_that_games_targets_until_the_next_game(tok, moves) -> None:
    ids = encode(tok, "e2e4 e2e4 e7e5") + encode(tok, "d2d4")
    counts = legal_move_targets(ids, moves, tok.bos_token_id)[1]
    assert counts[:2] == [20, 20] and counts[2:4] == [0, 0]  # after the second e2e4: nothing
    assert counts[5] == 20  # the next game starts over


def test_a_tokenizer_that_splits_moves_is_refused(pgn_dir) -> None:
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(["e2e4 e7e5 g1f3 b8c6"] * 10, trainer=trainers.BpeTrainer(vocab_size=300))
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    with pytest.raises(ValueError, match="no single token for 19[0-9][0-9] of the 1968 UCI moves"):
        MoveTokens(bpe)


def test_padding_targets_keeps_every_id_in_place() -> None:
    flat = [[3, 4, 5, 9], []]
    counts = [[3, 0, 1], [0, 0, 0]]
    legal = pad_legal_targets(flat, counts)
    assert legal.shape == (2, 3, 3) and legal.dtype == np.int64
    assert legal[0, 0].tolist() == [3, 4, 5] and legal[0, 2].tolist() == [9, -1, -1]
    assert (legal[1] == -1).all() and (legal[0, 1] == -1).all()


def test_the_loss_is_minus_log_legal_mass_and_its_gradient_moves_mass_onto_legal_moves() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 10, requires_grad=True)
    legal = torch.full((2, 3, 4), -1)
    legal[0, 0, :3] = torch.tensor([1, 4, 7])
    legal[1, 2, :2] = torch.tensor([0, 9])
    loss, mass = legal_move_loss(logits, legal)
    probs = logits.detach().softmax(-1)
    masses = torch.stack([probs[0, 0, [1, 4, 7]].sum(), probs[1, 2, [0, 9]].sum()])
    assert torch.allclose(loss, -masses.log().mean()) and torch.allclose(mass, masses.mean())
    loss.backward()
    grad = logits.grad
    assert grad is not None
    assert (grad[0, 1] == 0).all() and (grad[1, 0] == 0).all()  # positions without targets: no gradient
    assert (grad[0, 0, [1, 4, 7]] < 0).all() and (grad[0, 0, [0, 2, 3, 5, 6, 8, 9]] > 0).all()
    with torch.no_grad():
        stepped = logits - 1.0 * grad
    assert legal_move_loss(stepped, legal)[0] < loss


def test_no_targets_at_all_is_a_zero_loss_that_still_backpropagates() -> None:
    logits = torch.randn(1, 2, 5, requires_grad=True)
    loss, mass = legal_move_loss(logits, torch.full((1, 2, 1), -1))
    loss.backward()
    assert loss.item() == 0.0 and mass.item() == 0.0 and logits.grad is not None
