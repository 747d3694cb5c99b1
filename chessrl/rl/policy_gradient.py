"""PPO and GRPO math, Ray-free: advantages, KL estimators, clipped policy and value losses.

Pure PyTorch functions named like veRL's ``core_algos`` (``compute_gae_advantage_return``,
``compute_policy_loss`` = ``compute_policy_loss_vanilla``, ``compute_value_loss``, ``kl_penalty``,
``agg_loss``) and OpenRLHF (``compute_reward`` → :func:`compute_token_rewards`).

Shapes: ``bs`` rows (a completion, or one PPO episode), ``T`` positions (response tokens, or the
policy's moves). A mask is 1 (or ``True``) where a position is an action of the policy and 0 where
it is padding or an observation (the opponent's move); masked positions never reach a loss.

>>> lp, old = torch.log(torch.tensor([[1.5, 1.0]])), torch.zeros(1, 2)
>>> loss, m = compute_policy_loss(old, lp, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2))
>>> round(loss.item(), 4), m["pg_clipfrac"].item()  # the 1.5 ratio is clipped to 1.2
(-1.1, 0.5)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# Our names first; veRL's aliases ("kl", "mse", "low_var_kl") are accepted too.
KL_KINDS = {"k1": "k1", "abs": "abs", "k2": "k2", "k3": "k3", "kl": "k1", "mse": "k2", "low_var_kl": "k3"}
WHITEN_EPS = 1e-8


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is set, over all positions or along ``dim``; 0 where empty.

    Masked positions are ignored even when they hold ``nan`` or ``inf``.

    >>> masked_mean(torch.tensor([[1.0, 2.0, 9.0]]), torch.tensor([[1, 1, 0]]))
    tensor(1.5000)
    """
    valid = mask.bool()
    total = torch.where(valid, values, torch.zeros_like(values))
    if dim is None:
        return total.sum() / valid.sum().clamp(min=1)
    return total.sum(dim) / valid.sum(dim).clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` over the set positions of ``mask``; ``unbiased`` divides by n - 1 (veRL).

    Raises ValueError when ``unbiased`` and fewer than two positions are set.
    """
    centered = values - masked_mean(values, mask)
    variance = masked_mean(centered * centered, mask)
    if unbiased:
        n = int(mask.bool().sum())
        if n < 2:
            raise ValueError(f"an unbiased masked variance needs at least 2 valid positions, got {n}")
        variance = variance * n / (n - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """``(values - mean) / sqrt(var + 1e-8)`` with mean and unbiased variance over the mask (veRL).

    ``shift_mean=False`` adds the mean back (only the scale changes). Same shape as ``values``.
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + WHITEN_EPS)
    return whitened if shift_mean else whitened + mean


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over ``(bs, T)`` rewards and values: ``(advantages, returns)``.

    ``delta_t = r_t + gamma * V_next - V_t`` and ``A_t = delta_t + gamma * lam * A_next``, run from the
    end. A masked position is skipped (veRL): ``V_next`` and ``A_next`` carry through it unchanged,
    so the result on the valid positions equals GAE on the row with the masked steps removed; a
    reward at a masked step is dropped. The value after the last valid step is 0 (the episode ends).
    ``returns = advantages + values`` before whitening; then advantages are whitened over the mask
    when ``whiten``. Both outputs are 0 at masked positions and carry no gradient.

    >>> adv, ret = compute_gae_advantage_return(
    ...     torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]]), torch.ones(1, 2), 1.0, 1.0, whiten=False)
    >>> adv, ret
    (tensor([[0.5000, 0.5000]]), tensor([[1., 1.]]))
    """
    with torch.no_grad():
        rewards = token_level_rewards
        values = values.to(rewards.dtype)
        valid = response_mask.bool()
        next_value = torch.zeros_like(rewards[:, 0])
        last_gae = torch.zeros_like(rewards[:, 0])
        advantages = torch.zeros_like(rewards)
        for t in reversed(range(rewards.shape[-1])):
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            gae = delta + gamma * lam * last_gae
            next_value = torch.where(valid[:, t], values[:, t], next_value)
            last_gae = torch.where(valid[:, t], gae, last_gae)
            advantages[:, t] = last_gae
        returns = advantages + values
        if whiten:
            advantages = masked_whiten(advantages, response_mask)
        zero = torch.zeros_like(advantages)
        return torch.where(valid, advantages, zero), torch.where(valid, returns, zero)


def _group_ids(group_index: torch.Tensor | Sequence[Hashable], n: int, device: torch.device) -> torch.Tensor:
    """Dense ids ``0..G-1`` (bs,) for any hashable group keys, in order of first appearance."""
    keys = group_index.tolist() if isinstance(group_index, torch.Tensor) else list(group_index)
    if len(keys) != n:
        raise ValueError(f"group_index has {len(keys)} entries for {n} scores")
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long, device=device)


def compute_grpo_outcome_advantage(
    scores: torch.Tensor,
    group_index: torch.Tensor | Sequence[Hashable],
    eps: float = 1e-6,
    norm_by_std: bool = True,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """GRPO advantages ``(score - group mean) / (max(group std, std_floor) + eps)`` for ``(bs,)``
    scores.

    ``group_index`` (bs,) names each sample's prompt (ints, or any hashable such as uid strings).
    The std is unbiased (``torch.std``); a group of one sample gets mean 0 and std 1 (veRL), so its
    advantage is its score. ``norm_by_std=False`` is Dr. GRPO: ``score - group mean``. A
    ``std_floor`` keeps a group whose scores differ by engine noise alone from being blown up to
    full-size advantages. Broadcast over tokens with ``adv.unsqueeze(-1) * response_mask``.

    >>> compute_grpo_outcome_advantage(torch.tensor([1.0, 0.0, 2.0, 2.0]), [0, 0, 1, 1])
    tensor([ 0.7071, -0.7071,  0.0000,  0.0000])
    >>> compute_grpo_outcome_advantage(torch.tensor([1.0, 0.98]), [0, 0], std_floor=0.1)
    tensor([ 0.1000, -0.1000])
    """
    with torch.no_grad():
        ids = _group_ids(group_index, scores.shape[0], scores.device)
        counts = torch.bincount(ids).to(scores.dtype)
        mean = torch.zeros_like(counts).index_add_(0, ids, scores) / counts
        centered = scores - mean[ids]
        sq = torch.zeros_like(counts).index_add_(0, ids, centered * centered)
        std = torch.sqrt(sq / (counts - 1).clamp(min=1))
        single = counts == 1
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        advantages = scores - mean[ids]
        return advantages / (std[ids].clamp(min=std_floor) + eps) if norm_by_std else advantages


def zero_variance_group_share(scores: torch.Tensor, group_index: torch.Tensor | Sequence[Hashable]) -> float:
    """Share of groups of two or more samples whose scores are all equal (they teach GRPO nothing).

    Groups of one sample are left out of both counts; 0.0 when there is no larger group.

    >>> zero_variance_group_share(torch.tensor([1.0, 0.0, 2.0, 2.0, 5.0]), [0, 0, 1, 1, 2])
    0.5
    """
    ids = _group_ids(group_index, scores.shape[0], scores.device)
    n_groups = int(ids.max()) + 1 if ids.numel() else 0
    high = torch.full((n_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
    low = torch.full((n_groups,), torch.inf, dtype=scores.dtype, device=scores.device)
    high = high.scatter_reduce(0, ids, scores, reduce="amax")
    low = low.scatter_reduce(0, ids, scores, reduce="amin")
    multi = torch.bincount(ids, minlength=n_groups) > 1
    n_multi = int(multi.sum())
    return float(((high == low) & multi).sum()) / n_multi if n_multi else 0.0


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference, same shape as the inputs (bs, T).

    ``k1``: ``logprob - ref``; ``abs``: ``|logprob - ref|``; ``k2`` (veRL ``mse``):
    ``0.5 * (logprob - ref)**2``; ``k3`` (veRL ``low_var_kl``): ``r - log r - 1`` with
    ``r = exp(ref - logprob)``, clamped to [-10, 10]. veRL's names ``kl``, ``mse``, ``low_var_kl``
    are accepted too.

    >>> kl_penalty(torch.tensor([0.0]), torch.tensor([-1.0]), "k2")
    tensor([0.5000])
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r} (supported: {', '.join(KL_KINDS)})")
    canonical = KL_KINDS[kind]
    diff = logprob - ref_logprob
    if canonical == "k1":
        return diff
    if canonical == "abs":
        return diff.abs()
    if canonical == "k2":
        return 0.5 * diff.square()
    log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)  # log(ref / policy), clamped before exp
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, min=-10.0, max=10.0)


def agg_loss(
    loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str, norm_length: int | None = None
) -> torch.Tensor:
    """Reduce a ``(bs, T)`` per-token loss to a scalar.

    ``token-mean``: mean over all valid tokens of the batch. ``seq-mean-token-sum``: each row's sum,
    then the mean over rows. ``seq-mean-token-mean``: each row's mean, then the mean over rows.
    ``seq-mean-token-sum-norm`` (Dr. GRPO): each row's sum divided by the constant ``norm_length``
    (default ``T``), then the mean over rows (veRL sums over rows here instead). The ``seq-mean``
    modes average over rows with at least one valid token.

    >>> agg_loss(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[1, 1], [1, 0]]), "seq-mean-token-mean")
    tensor(2.2500)
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r} (supported: {', '.join(LOSS_AGG_MODES)})")
    valid = loss_mask.bool()
    seq_sum = torch.where(valid, loss_mat, torch.zeros_like(loss_mat)).sum(-1)
    if loss_agg_mode == "seq-mean-token-sum":
        seq_losses = seq_sum
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_losses = seq_sum / valid.sum(-1).clamp(min=1)
    else:
        seq_losses = seq_sum / (loss_mask.shape[-1] if norm_length is None else norm_length)
    return masked_mean(seq_losses, valid.any(-1))


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (veRL ``compute_policy_loss_vanilla``): ``(pg_loss, metrics)``.

    Inputs are ``(bs, T)``. ``ratio = exp(clamp(log_prob - old_log_prob, -20, 20))``; per token
    ``max(-A * ratio, -A * clamp(ratio, 1 - low, 1 + high))`` (``high`` defaults to ``low``). With
    ``clip_ratio_c`` (> 1, dual clip) a token with ``A < 0`` is further bounded by ``-A * c``.
    Metrics (detached scalars): ``pg_clipfrac`` (share of valid tokens where the clipped branch
    wins), ``ppo_kl`` (approx KL, masked mean of ``old_log_prob - log_prob``), ``pg_clipfrac_lower``
    (share where the dual clip bound wins; 0 without it).
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be greater than 1.0 (dual clip), got {clip_ratio_c}")
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).to(ratio.dtype), response_mask)
    if clip_ratio_c is None:
        pg_losses = clip_pg_losses1
        pg_clipfrac_lower = torch.zeros_like(pg_clipfrac)
    else:
        pg_losses3 = -advantages * clip_ratio_c
        negative = advantages < 0
        pg_losses = torch.where(negative, torch.minimum(pg_losses3, clip_pg_losses1), clip_pg_losses1)
        lower = torch.gt(clip_pg_losses1, pg_losses3) & negative
        pg_clipfrac_lower = masked_mean(lower.to(ratio.dtype), response_mask)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    metrics = {
        "pg_clipfrac": pg_clipfrac.detach(),
        "ppo_kl": ppo_kl.detach(),
        "pg_clipfrac_lower": pg_clipfrac_lower.detach(),
    }
    return pg_loss, metrics


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float | None,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss (veRL/OpenRLHF) on ``(bs, T)`` inputs: ``(vf_loss, vf_clipfrac)``.

    ``vpredclipped = values + clamp(vpreds - values, -c, c)``; per token
    ``0.5 * max((vpreds - returns)**2, (vpredclipped - returns)**2)``. ``values`` are the critic's
    predictions at rollout time; ``cliprange_value=None`` turns clipping off. ``vf_clipfrac``
    (detached) is the share of valid tokens where the clipped branch wins.
    """
    vf_losses1 = (vpreds - returns).square()
    if cliprange_value is None:
        vf_losses2 = vf_losses1
    else:
        vpredclipped = values + torch.clamp(vpreds - values, -cliprange_value, cliprange_value)
        vf_losses2 = (vpredclipped - returns).square()
    vf_loss = 0.5 * agg_loss(torch.maximum(vf_losses1, vf_losses2), response_mask, loss_agg_mode)
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).to(vpreds.dtype), response_mask)
    return vf_loss, vf_clipfrac.detach()


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dim, ``logsumexp(x) - sum(p * x)``: (bs, T, V) → (bs, T).

    ``-inf`` logits (masked moves) are fine: they add nothing.

    >>> entropy_from_logits(torch.tensor([0.0, 0.0, -torch.inf]))
    tensor(0.6931)
    """
    probs = torch.softmax(logits, dim=-1)
    safe = logits.masked_fill(probs == 0, 0.0)
    return torch.logsumexp(logits, dim=-1) - (probs * safe).sum(-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)`` at ``labels``: (bs, T, V) and (bs, T) ints → (bs, T).

    Computed as ``logit[label] - logsumexp(logits)``, without the (bs, T, V) log-softmax.

    >>> logprobs_from_logits(torch.tensor([[0.0, 0.0]]), torch.tensor([1]))
    tensor([-0.6931])
    """
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var[returns - values] / Var[returns]`` over the mask (CleanRL's diagnostic), as a float.

    1 is a perfect critic, 0 one no better than a constant, negative one worse. ``nan`` when the
    returns do not vary (or no position is valid), as in CleanRL.
    """
    valid = mask.bool()
    if int(valid.sum()) == 0:
        return float("nan")
    var_returns = float(masked_var(returns, valid, unbiased=False))
    if var_returns == 0.0:
        return float("nan")
    return 1.0 - float(masked_var(returns - values, valid, unbiased=False)) / var_returns


def compute_token_rewards(
    rm_scores: torch.Tensor, kl: torch.Tensor, response_mask: torch.Tensor, kl_coef: float
) -> torch.Tensor:
    """Per-token rewards (OpenRLHF ``compute_reward``): ``-kl_coef * kl`` at every valid token (bs, T).

    ``rm_scores`` (bs,) adds each row's score at its last valid token; ``rm_scores`` (bs, T) (a
    score per action, as PPO on chess moves uses) adds the scores token by token. Masked positions
    and rows without a valid token get 0.

    >>> compute_token_rewards(torch.tensor([1.0]), torch.tensor([[0.5, 0.5, 9.0]]), torch.tensor([[1, 1, 0]]), 0.1)
    tensor([[-0.0500,  0.9500,  0.0000]])
    """
    valid = response_mask.bool()
    rewards = -kl_coef * kl
    if rm_scores.dim() == 2:
        rewards = rewards + rm_scores.to(rewards.dtype)
    else:
        positions = torch.arange(valid.shape[-1], device=valid.device).expand_as(valid)
        last = torch.where(valid, positions, -1).amax(-1)  # (bs,) -1 for an empty row
        is_last = positions == last.unsqueeze(-1)
        rewards = rewards + torch.where(is_last, rm_scores.to(rewards.dtype).unsqueeze(-1), 0.0)
    return torch.where(valid, rewards, torch.zeros_like(rewards))
