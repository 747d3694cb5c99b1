"""PPO and GRPO math against hand-worked numbers: GAE, GRPO advantages, KL estimators, the clipped
policy and value losses, loss aggregation, and the diagnostics."""

from __future__ import annotations

import doctest
import math
import random

import pytest
import torch

import chessrl.rl.policy_gradient as pg
from chessrl.rl.policy_gradient import (
    agg_loss,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_policy_loss,
    compute_token_rewards,
    compute_value_loss,
    entropy_from_logits,
    explained_variance,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    zero_variance_group_share,
)

T = torch.tensor


def close(actual: torch.Tensor | float, expected: list[float] | list[list[float]] | float) -> None:
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float32), T(expected), atol=1e-5, rtol=1e-5
    )


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(pg, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# --- masked statistics ---------------------------------------------------------------------------


def test_masked_mean_ignores_masked_positions_even_nan() -> None:
    values = T([[1.0, 2.0, math.nan], [4.0, math.inf, 6.0]])
    mask = T([[1, 1, 0], [1, 0, 1]])
    close(masked_mean(values, mask), (1 + 2 + 4 + 6) / 4)
    close(masked_mean(values, mask, dim=-1), [1.5, 5.0])
    close(masked_mean(values, torch.zeros(2, 3)), 0.0)  # empty mask: 0, not nan


def test_masked_whiten_by_hand_and_on_random_values() -> None:
    # [1, 2, 3]: mean 2, unbiased var ((-1)^2 + 0 + 1^2) / (3 - 1) = 1 -> [-1, 0, 1]; position 4 is masked.
    close(masked_whiten(T([[1.0, 2.0, 3.0, 50.0]]), T([[1, 1, 1, 0]]))[:, :3], [[-1.0, 0.0, 1.0]])
    # shift_mean=False only rescales: [-1, 0, 1] + 2.
    close(masked_whiten(T([[1.0, 2.0, 3.0]]), torch.ones(1, 3), shift_mean=False), [[1.0, 2.0, 3.0]])
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(4, 7, generator=gen) * 3.0 + 5.0
    mask = torch.rand(4, 7, generator=gen) > 0.3
    white = masked_whiten(values, mask)
    close(masked_mean(white, mask), 0.0)
    close(masked_var(white, mask), 1.0)
    close(masked_var(values, mask), values[mask].var().item())  # unbiased, as torch.var


def test_masked_var_needs_two_positions() -> None:
    with pytest.raises(ValueError, match="at least 2 valid positions, got 1"):
        masked_var(T([[1.0, 2.0]]), T([[1, 0]]))


# --- GAE -----------------------------------------------------------------------------------------


def test_gae_three_steps_by_hand() -> None:
    # gamma = 0.9, lam = 0.8 (gamma * lam = 0.72); rewards [0, 0, 1], values [0.5, 0.6, 0.7]
    # t=2: delta = 1 + 0.9*0   - 0.7 = 0.3              A2 = 0.3
    # t=1: delta = 0 + 0.9*0.7 - 0.6 = 0.03             A1 = 0.03 + 0.72*0.3   = 0.246
    # t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04             A0 = 0.04 + 0.72*0.246 = 0.21712
    # returns = A + V = [0.71712, 0.846, 1.0]
    rewards, values, mask = T([[0.0, 0.0, 1.0]]), T([[0.5, 0.6, 0.7]]), torch.ones(1, 3)
    adv, ret = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    close(adv, [[0.21712, 0.246, 0.3]])
    close(ret, [[0.71712, 0.846, 1.0]])
    # whitened: (A - 0.25437333) / std([0.21712, 0.246, 0.3], unbiased); returns are taken before whitening
    raw = T([0.21712, 0.246, 0.3])
    white, ret_w = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    close(white, [((raw - raw.mean()) / raw.std()).tolist()])
    close(ret_w, [[0.71712, 0.846, 1.0]])


def test_gae_gamma_one_lam_one_is_return_minus_value() -> None:
    # gamma = lam = 1: A_t = sum of rewards from t on - V_t. Rewards [1, 2, 3] -> returns-to-go [6, 5, 3].
    adv, ret = compute_gae_advantage_return(
        T([[1.0, 2.0, 3.0]]), T([[1.0, 1.0, 1.0]]), torch.ones(1, 3), 1.0, 1.0, whiten=False
    )
    close(adv, [[5.0, 4.0, 2.0]])
    close(ret, [[6.0, 5.0, 3.0]])


def test_gae_masked_middle_step_is_skipped() -> None:
    # The step at index 1 (an opponent's move) is masked: its reward 5 and value 99 are ignored, the
    # recursion carries V_next and A_next through it, and the valid steps equal the 3-step case above.
    rewards, values = T([[0.0, 5.0, 0.0, 1.0]]), T([[0.5, 99.0, 0.6, 0.7]])
    mask = T([[1, 0, 1, 1]])
    adv, ret = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    close(adv, [[0.21712, 0.0, 0.246, 0.3]])  # masked positions are 0
    close(ret, [[0.71712, 0.0, 0.846, 1.0]])
    short, _ = compute_gae_advantage_return(
        T([[0.0, 0.0, 1.0]]), T([[0.5, 0.6, 0.7]]), torch.ones(1, 3), 0.9, 0.8
    )
    white, _ = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    close(white[mask.bool()], short[0].tolist())


def test_gae_trailing_padding_is_ignored() -> None:
    rewards, values = T([[0.0, 0.0, 1.0, 7.0, 7.0]]), T([[0.5, 0.6, 0.7, 3.0, math.nan]])
    adv, ret = compute_gae_advantage_return(rewards, values, T([[1, 1, 1, 0, 0]]), 0.9, 0.8, whiten=False)
    close(adv, [[0.21712, 0.246, 0.3, 0.0, 0.0]])
    close(ret, [[0.71712, 0.846, 1.0, 0.0, 0.0]])


def _reference_gae(
    rewards: list[list[float]], values: list[list[float]], mask: list[list[int]], gamma: float, lam: float
) -> tuple[list[list[float]], list[list[float]]]:
    """Plain Python: GAE on each row's valid steps alone, 0 elsewhere; returns = A + V."""
    adv = [[0.0] * len(row) for row in rewards]
    ret = [[0.0] * len(row) for row in rewards]
    for i, row in enumerate(mask):
        steps = [t for t, m in enumerate(row) if m]
        next_value, last = 0.0, 0.0
        for t in reversed(steps):
            delta = rewards[i][t] + gamma * next_value - values[i][t]
            last = delta + gamma * lam * last
            next_value = values[i][t]
            adv[i][t], ret[i][t] = last, last + values[i][t]
    return adv, ret


def test_gae_matches_plain_python_reference_on_random_inputs() -> None:
    rng = random.Random(7)
    for _ in range(5):
        bs, n = rng.randint(1, 4), rng.randint(2, 9)
        rewards = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(bs)]
        values = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(bs)]
        mask = [[int(rng.random() < 0.7) for _ in range(n)] for _ in range(bs)]
        mask[0][0], mask[0][1] = 1, 1  # at least two valid steps, so whitening is defined
        gamma, lam = rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0)
        ref_adv, ref_ret = _reference_gae(rewards, values, mask, gamma, lam)
        args = (T(rewards), T(values), T(mask), gamma, lam)
        adv, ret = compute_gae_advantage_return(*args, whiten=False)
        close(adv, ref_adv)
        close(ret, ref_ret)
        valid = [
            a for arow, mrow in zip(ref_adv, mask, strict=True) for a, m in zip(arow, mrow, strict=True) if m
        ]
        mean = sum(valid) / len(valid)
        std = math.sqrt(sum((a - mean) ** 2 for a in valid) / (len(valid) - 1))
        ref_white = [
            [(a - mean) / std if m else 0.0 for a, m in zip(ar, mr, strict=True)]
            for ar, mr in zip(ref_adv, mask, strict=True)
        ]
        white, ret_w = compute_gae_advantage_return(*args)
        close(white, ref_white)
        close(ret_w, ref_ret)


def test_gae_carries_no_gradient() -> None:
    values = T([[0.5, 0.6, 0.7]], requires_grad=True)
    adv, ret = compute_gae_advantage_return(T([[0.0, 0.0, 1.0]]), values, torch.ones(1, 3), 0.9, 0.8)
    assert not adv.requires_grad and not ret.requires_grad


# --- GRPO ----------------------------------------------------------------------------------------


def test_grpo_advantages_two_groups_zero_variance_and_singleton() -> None:
    # group 0: [1, 0]: mean 0.5, unbiased std sqrt((0.5^2 + 0.5^2) / 1) = sqrt(0.5) = 0.70711
    #          -> +-0.5 / (0.70711 + 1e-6) = +-0.70711
    # group 1: [2, 2]: zero variance -> 0 / (0 + 1e-6) = 0
    # group 2: [3] alone: mean 0, std 1 (veRL) -> 3 / (1 + 1e-6)
    scores, groups = T([1.0, 0.0, 2.0, 2.0, 3.0]), [0, 0, 1, 1, 2]
    adv = compute_grpo_outcome_advantage(scores, groups)
    s = math.sqrt(0.5) + 1e-6
    close(adv, [0.5 / s, -0.5 / s, 0.0, 0.0, 3.0 / (1 + 1e-6)])
    # Dr. GRPO: no std division -> score - group mean
    close(compute_grpo_outcome_advantage(scores, groups, norm_by_std=False), [0.5, -0.5, 0.0, 0.0, 3.0])
    # groups of 2 or more: 0 varies, 1 does not; the singleton is left out -> 1 / 2
    assert zero_variance_group_share(scores, groups) == 0.5


def test_grpo_group_of_three_interleaved_with_any_keys() -> None:
    # group "b": [1, 2, 6]: mean 3, deviations [-2, -1, 3], var 14 / 2 = 7, std 2.64575
    # group "a": [4, 0]: mean 2, std sqrt(8) = 2.82843 -> +-0.70711
    scores = T([1.0, 4.0, 2.0, 0.0, 6.0])
    keys = ["b", "a", "b", "a", "b"]
    s7, s8 = math.sqrt(7.0), math.sqrt(8.0)
    expected = [-2 / s7, 2 / s8, -1 / s7, -2 / s8, 3 / s7]
    close(compute_grpo_outcome_advantage(scores, keys, eps=0.0), expected)
    non_contiguous = T([9, 3, 9, 3, 9])
    close(compute_grpo_outcome_advantage(scores, non_contiguous, eps=0.0), expected)
    assert zero_variance_group_share(scores, keys) == 0.0
    assert zero_variance_group_share(T([1.0]), [0]) == 0.0  # no group of two or more


def test_grpo_rejects_mismatched_group_index() -> None:
    with pytest.raises(ValueError, match="group_index has 2 entries for 3 scores"):
        compute_grpo_outcome_advantage(T([1.0, 2.0, 3.0]), [0, 0])


# --- KL estimators -------------------------------------------------------------------------------


def test_kl_estimators_by_hand() -> None:
    # logprob - ref = -1.0 - (-1.5) = 0.5 and -2.0 - (-1.0) = -1.0
    logprob, ref = T([-1.0, -2.0]), T([-1.5, -1.0])
    close(kl_penalty(logprob, ref, "k1"), [0.5, -1.0])
    close(kl_penalty(logprob, ref, "abs"), [0.5, 1.0])
    close(kl_penalty(logprob, ref, "k2"), [0.125, 0.5])  # 0.5 * 0.25, 0.5 * 1
    # k3: r = exp(ref - logprob); r - log r - 1: exp(-0.5) + 0.5 - 1 = 0.10653, e - 1 - 1 = 0.71828
    close(kl_penalty(logprob, ref, "k3"), [math.exp(-0.5) - 0.5, math.e - 2.0])
    for alias, name in (("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")):
        close(kl_penalty(logprob, ref, alias), kl_penalty(logprob, ref, name).tolist())
    # k3 is clamped to [-10, 10]: ref - logprob = 30 would be exp(20) - 21 after the log-ratio clamp
    close(kl_penalty(T([-30.0]), T([0.0]), "k3"), [10.0])
    close(kl_penalty(T([0.0]), T([0.0]), "k3"), [0.0])


def test_kl_unknown_kind_lists_supported() -> None:
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k4' \(supported: k1, abs, k2, k3"):
        kl_penalty(T([0.0]), T([0.0]), "k4")


# --- loss aggregation ----------------------------------------------------------------------------

LOSS = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = T([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 2.5),  # (1 + 2 + 3 + 4) / 4 valid tokens
        ("seq-mean-token-sum", 5.0),  # row sums 6 and 4 -> (6 + 4) / 2
        ("seq-mean-token-mean", 3.0),  # row means 2 and 4 -> (2 + 4) / 2
        ("seq-mean-token-sum-norm", 10.0 / 6.0),  # row sums / T=3 -> (2 + 4/3) / 2
    ],
)
def test_agg_loss_modes_on_2x3(mode: str, expected: float) -> None:
    close(agg_loss(LOSS, MASK, mode), expected)


def test_agg_loss_norm_length_and_empty_rows() -> None:
    close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=4), 1.25)  # (6/4 + 4/4) / 2
    empty_second = T([[1, 1, 1], [0, 0, 0]])
    close(agg_loss(LOSS, empty_second, "seq-mean-token-mean"), 2.0)  # the empty row is not averaged in
    close(agg_loss(LOSS, empty_second, "seq-mean-token-sum"), 6.0)


def test_agg_loss_unknown_mode_lists_supported() -> None:
    with pytest.raises(ValueError, match="supported: token-mean, seq-mean-token-sum, seq-mean-token-mean"):
        agg_loss(LOSS, MASK, "token-sum")


# --- policy loss ---------------------------------------------------------------------------------


def test_policy_loss_ratio_one_and_a_half_both_signs() -> None:
    # ratio 1.5, eps 0.2 -> clipped ratio 1.2
    # A = +1: max(-1.5, -1.2) = -1.2 (clipped branch wins)
    # A = -1: max(+1.5, +1.2) = +1.5 (unclipped wins: the pessimistic bound)
    # token-mean: (-1.2 + 1.5) / 2 = 0.15; clipfrac 1/2; approx KL = mean(old - new) = -log 1.5
    log_prob = torch.log(T([[1.5, 1.5]])).requires_grad_()
    old = torch.zeros(1, 2)
    loss, m = compute_policy_loss(old, log_prob, T([[1.0, -1.0]]), torch.ones(1, 2))
    close(loss, 0.15)
    close(m["pg_clipfrac"], 0.5)
    close(m["ppo_kl"], -math.log(1.5))
    close(m["pg_clipfrac_lower"], 0.0)
    loss.backward()
    assert log_prob.grad is not None
    # the clipped token has no gradient; the other: d(-A * ratio)/dlogp / 2 tokens = 1.5 * 1 / 2
    close(log_prob.grad, [[0.0, 0.75]])


def test_policy_loss_ratio_one_half_and_asymmetric_clip() -> None:
    # ratio 0.5, clipped 0.8: A = +1: max(-0.5, -0.8) = -0.5; A = -1: max(0.5, 0.8) = 0.8 (clipped)
    loss, m = compute_policy_loss(
        torch.zeros(1, 2), torch.log(T([[0.5, 0.5]])), T([[1.0, -1.0]]), torch.ones(1, 2)
    )
    close(loss, 0.15)  # (-0.5 + 0.8) / 2
    close(m["pg_clipfrac"], 0.5)
    # clip-higher (DAPO): eps_high 0.28 -> ratio 1.5 with A = +1 is clipped at 1.28
    loss, _ = compute_policy_loss(
        torch.zeros(1, 1), torch.log(T([[1.5]])), T([[1.0]]), torch.ones(1, 1), 0.2, 0.28
    )
    close(loss, -1.28)


def test_policy_loss_dual_clip() -> None:
    # ratio 5, eps 0.2, c = 3
    # A = -1: max(5, 1.2) = 5, then min(-A * c = 3, 5) = 3 (dual-clip bound wins)
    # A = +1: max(-5, -1.2) = -1.2; the dual clip applies only to A < 0
    # mean (3 - 1.2) / 2 = 0.9; pg_clipfrac: only the A = +1 token = 1/2; pg_clipfrac_lower 1/2
    args = (torch.zeros(1, 2), torch.log(T([[5.0, 5.0]])), T([[-1.0, 1.0]]), torch.ones(1, 2))
    loss, m = compute_policy_loss(*args, clip_ratio_c=3.0)
    close(loss, 0.9)
    close(m["pg_clipfrac"], 0.5)
    close(m["pg_clipfrac_lower"], 0.5)
    loss, _ = compute_policy_loss(*args)  # without dual clip: (5 - 1.2) / 2
    close(loss, 1.9)
    with pytest.raises(ValueError, match="clip_ratio_c must be greater than 1.0"):
        compute_policy_loss(*args, clip_ratio_c=1.0)


def test_policy_loss_masks_and_clamps_log_ratio() -> None:
    # a masked token with a huge log-ratio does not count; log-ratio 50 is clamped to 20 before exp
    loss, m = compute_policy_loss(torch.zeros(1, 2), T([[0.0, 50.0]]), T([[2.0, 1.0]]), T([[1, 0]]))
    close(loss, -2.0)
    close(m["ppo_kl"], 0.0)
    loss, m = compute_policy_loss(torch.zeros(1, 1), T([[50.0]]), T([[-1.0]]), torch.ones(1, 1))
    close(loss, math.exp(20.0))
    close(m["ppo_kl"], -20.0)


# --- value loss ----------------------------------------------------------------------------------


def test_value_loss_clipped_branch_wins() -> None:
    # token 1: values 1.0, vpred 2.0, return 2.5, c 0.2 -> vpredclipped 1.2
    #   (2.0 - 2.5)^2 = 0.25, (1.2 - 2.5)^2 = 1.69 -> 1.69 (clipped wins)
    # token 2: values 1.0, vpred 1.5, return 1.0 -> vpredclipped 1.2
    #   (1.5 - 1.0)^2 = 0.25, (1.2 - 1.0)^2 = 0.04 -> 0.25 (unclipped wins)
    # 0.5 * (1.69 + 0.25) / 2 = 0.485; clipfrac 1/2
    vpreds, returns, values = T([[2.0, 1.5]]), T([[2.5, 1.0]]), T([[1.0, 1.0]])
    vf_loss, clipfrac = compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.2)
    close(vf_loss, 0.485)
    close(clipfrac, 0.5)
    vf_loss, clipfrac = compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=None)
    close(vf_loss, 0.125)  # 0.5 * (0.25 + 0.25) / 2
    close(clipfrac, 0.0)
    vf_loss, _ = compute_value_loss(vpreds, returns, values, T([[1, 0]]), 0.2, "seq-mean-token-sum")
    close(vf_loss, 0.845)  # 0.5 * 1.69


# --- diagnostics and rewards ---------------------------------------------------------------------


def test_entropy_and_logprobs_from_logits() -> None:
    close(entropy_from_logits(torch.zeros(2, 4)), [math.log(4.0)] * 2)
    close(entropy_from_logits(T([[0.0, 0.0, -math.inf, -math.inf]])), [math.log(2.0)])
    logits = T([[0.0, -math.inf, 0.0]], requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 5, generator=gen)
    labels = torch.randint(0, 5, (2, 3), generator=gen)
    expected = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    close(logprobs_from_logits(logits, labels), expected.tolist())
    probs = torch.softmax(logits, -1)
    close(entropy_from_logits(logits), (-(probs * probs.log()).sum(-1)).tolist())


def test_explained_variance_by_hand() -> None:
    returns, mask = T([[1.0, 2.0, 3.0, 99.0]]), T([[1, 1, 1, 0]])
    assert explained_variance(T([[1.0, 2.0, 3.0, 0.0]]), returns, mask) == pytest.approx(1.0)
    # constant prediction at the mean: Var[returns - 2] = Var[returns] -> 0
    assert explained_variance(T([[2.0, 2.0, 2.0, 0.0]]), returns, mask) == pytest.approx(0.0)
    # values [0, 0, 0]: residuals = returns -> 0; values [3, 2, 1]: residuals [-2, 0, 2], var 8/3 vs 2/3 -> -3
    assert explained_variance(T([[3.0, 2.0, 1.0, 0.0]]), returns, mask) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(torch.zeros(1, 2), T([[5.0, 5.0]]), torch.ones(1, 2)))


def test_token_rewards_score_at_last_valid_token() -> None:
    # row 0: -0.1 * [0.5, 0.5] + score 1 at index 1 -> [-0.05, 0.95, 0]
    # row 1: -0.1 * [0.2, 0.4, 0.6] + score 2 at index 2 -> [-0.02, -0.04, 1.94]
    # row 2: no valid token -> zeros
    kl = T([[0.5, 0.5, 9.0], [0.2, 0.4, 0.6], [1.0, 1.0, 1.0]])
    mask = T([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    rewards = compute_token_rewards(T([1.0, 2.0, 3.0]), kl, mask, kl_coef=0.1)
    close(rewards, [[-0.05, 0.95, 0.0], [-0.02, -0.04, 1.94], [0.0, 0.0, 0.0]])
    # a score per action (PPO on moves): [0.3, -0.2] - 0.1 * [0.5, 0.5]
    dense = compute_token_rewards(T([[0.3, -0.2, 7.0]]), kl[:1], mask[:1], kl_coef=0.1)
    close(dense, [[0.25, -0.25, 0.0]])
