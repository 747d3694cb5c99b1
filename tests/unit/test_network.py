"""The residual policy/value network: shapes, the policy layout of chessrl.search.board_encoding, a loss
that goes down, and the loss against hand-worked numbers."""

from __future__ import annotations

import math

import chess
import numpy as np
import pytest
import torch

from chessrl.search.board_encoding import NUM_ACTIONS, encode_boards, index_to_move, legal_mask, move_to_index
from chessrl.search.network import NetConfig, PolicyValueNet, alphazero_loss

TINY = NetConfig(blocks=1, channels=16, history=2, value_hidden=16)

POSITIONS = [
    chess.Board(),
    chess.Board("r3k2r/pppppppp/8/8/8/8/PPPPPPPP/R3K2R b KQkq - 0 1"),
    chess.Board("1n1n4/2P5/8/8/8/8/5p2/k3N1NK w - - 0 1"),
    chess.Board("rnbqkbnr/pppp1ppp/8/8/3pP3/8/PPP2PPP/RNBQKBNR b KQkq e3 0 3"),
]


def tiny_net(seed: int = 0) -> PolicyValueNet:
    torch.manual_seed(seed)
    return PolicyValueNet(TINY)


def test_shapes_and_value_range() -> None:
    net = tiny_net()
    planes = torch.from_numpy(encode_boards(POSITIONS, history=2))
    logits, values = net(planes)
    assert logits.shape == (4, NUM_ACTIONS) and values.shape == (4,)
    np_logits, np_values = net.predict(planes.numpy())
    assert np_logits.dtype == np.float32 and np_values.shape == (4,)
    assert np.all(np.abs(np_values) <= 1)
    assert net.training  # predict restores the mode


def test_predict_is_eval_mode_and_batch_independent() -> None:
    net = tiny_net()
    planes = encode_boards(POSITIONS, history=2)
    logits, values = net.predict(planes)
    one_logits, one_values = net.predict(planes[2:3])
    np.testing.assert_allclose(one_logits[0], logits[2], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(one_values[0], values[2], rtol=1e-4, atol=1e-5)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="NetConfig.channels must be an integer >= 1, got 0"):
        NetConfig(channels=0)
    assert NetConfig(history=8).input_channels == 119


def test_policy_logits_are_laid_out_plane_major_like_the_action_indices() -> None:
    net = tiny_net()
    final = net.policy_head[-1]
    assert isinstance(final, torch.nn.Conv2d)
    with torch.no_grad():
        final.weight.zero_()
        final.bias.copy_(torch.arange(final.out_channels, dtype=torch.float32))
    logits, _ = net.predict(encode_boards(POSITIONS[:1], history=2))
    np.testing.assert_array_equal(logits[0], np.arange(NUM_ACTIONS) // 64)
    # every e2e4-like index (plane 1, any square) carries that plane's bias
    assert logits[0, move_to_index(chess.Board(), chess.Move.from_uci("e2e4"))] == 1


def test_masking_illegal_moves_leaves_exactly_the_legal_indices() -> None:
    net = tiny_net()
    logits, _ = net.predict(encode_boards(POSITIONS, history=2))
    for board, row in zip(POSITIONS, logits, strict=True):
        mask = legal_mask(board)
        masked = np.where(mask, row, -np.inf)
        probs = np.exp(masked - masked.max())
        probs /= probs.sum()
        assert set(np.flatnonzero(probs > 0).tolist()) == set(np.flatnonzero(mask).tolist())
        best = index_to_move(board, int(np.argmax(masked)))
        assert best in board.legal_moves


def test_a_few_steps_fit_a_tiny_batch_and_learn_the_target_move() -> None:
    net = tiny_net()
    planes = torch.from_numpy(encode_boards(POSITIONS, history=2))
    target_pi = torch.zeros(len(POSITIONS), NUM_ACTIONS)
    targets = ["e2e4", "e8g8", "c7d8n", "d4e3"]
    for i, (board, uci) in enumerate(zip(POSITIONS, targets, strict=True)):
        target_pi[i, move_to_index(board, chess.Move.from_uci(uci))] = 1.0
    target_z = torch.tensor([0.0, 1.0, -1.0, 0.5])
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        logits, values = net(planes)
        total, _, _ = alphazero_loss(logits, values, target_pi, target_z, net)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        losses.append(total.item())
    assert losses[-1] < 0.5 * losses[0]
    logits, _ = net.predict(planes.numpy())
    for board, row, uci in zip(POSITIONS, logits, targets, strict=True):
        masked = np.where(legal_mask(board), row, -np.inf)
        assert index_to_move(board, int(np.argmax(masked))).uci() == uci


def test_loss_against_hand_worked_numbers() -> None:
    logits = torch.full((1, NUM_ACTIONS), -math.inf)
    logits[0, 0], logits[0, 1] = 0.0, math.log(3.0)  # softmax: 1/4, 3/4
    target_pi = torch.zeros(1, NUM_ACTIONS)
    target_pi[0, 0], target_pi[0, 1] = 0.5, 0.5
    logits.requires_grad_(True)
    values = torch.tensor([0.5])
    total, policy_ce, value_mse = alphazero_loss(logits, values, target_pi, torch.tensor([-1.0]))
    assert policy_ce.item() == pytest.approx(-(0.5 * math.log(0.25) + 0.5 * math.log(0.75)))
    assert float(value_mse) == pytest.approx(2.25)
    assert total.item() == pytest.approx(policy_ce.item() + 2.25)
    total.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()  # -inf logits are harmless
    # the L2 term: l2 * sum of squared parameters
    net = tiny_net()
    squares = sum((p.detach() ** 2).sum().item() for p in net.parameters())
    with_l2, _, _ = alphazero_loss(logits.detach(), values, target_pi, torch.tensor([-1.0]), net, l2=1e-3)
    assert with_l2.item() == pytest.approx(total.item() + 1e-3 * squares, rel=1e-5)


def test_loss_refuses_wrong_shapes() -> None:
    with pytest.raises(ValueError, match=r"must both be \(B, 4672\)"):
        alphazero_loss(torch.zeros(2, 10), torch.zeros(2), torch.zeros(2, 10), torch.zeros(2))
