"""GRPO's objective, Ray-free: group advantages, the loss, and the completion log-probabilities
it is computed on (:mod:`chessrl.rl.grpo` samples and scores the groups and steps the optimiser).

Advantages: :func:`chessrl.rl.policy_gradient.compute_grpo_outcome_advantage` over each group of
``group_size`` completions of one prompt. Loss types (:func:`grpo_loss`), the formulas of veRL's
``core_algos`` and the papers:

- ``grpo``: ``A = (r - mean) / std`` per group; clipped surrogate (ε); per-sequence token mean,
  then the mean over sequences; ``+ beta * k3`` KL to the reference, same aggregation.
- ``dr_grpo`` (Dr. GRPO): ``A = r - mean`` (no std); per-sequence token *sum* over a constant
  length, then the mean over sequences.
- ``dapo`` (DAPO): ``A`` as ``grpo``; clip-higher (``clip_high``, 0.28); token mean over the
  batch; groups whose rewards are all equal are dropped from the loss (dynamic sampling).
- ``dpo`` (online DPO, :func:`group_pairs` and :func:`online_dpo_loss`): each group's best and
  worst samples, when their rewards differ by ``pair_margin``, are a chosen/rejected pair of the
  current policy's own samples; DPO's sigmoid loss against the frozen reference (beta) plus an
  NLL anchor on the chosen sample (RPO, ``rpo_alpha``). Every iteration samples from the updated
  policy, so the pairs stay on-policy (iterative / online DPO: Xiong et al. 2024, OpenRLHF's
  iterative DPO; RPO: Pang et al. 2024).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from chessrl.rl.grpo_types import GRPOSettings, Sample
from chessrl.rl.policy_gradient import (
    agg_loss,
    compute_grpo_outcome_advantage,
    compute_policy_loss,
    kl_penalty,
    masked_mean,
)


def group_advantages(
    rewards: torch.Tensor,
    groups: Sequence[Hashable],
    loss_type: str,
    std_floor: float = 0.0,
    drop_flat: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample advantages and a keep mask (``dapo``, or ``drop_flat``, drops groups whose
    rewards are all equal); ``std_floor`` bounds the std that grpo and dapo divide by.

    >>> a, keep = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), [0, 0, 1, 1], "dr_grpo")
    >>> a.tolist(), keep.tolist()
    ([0.5, -0.5, 0.0, 0.0], [True, True, True, True])
    >>> group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), [0, 0, 1, 1], "dapo")[1].tolist()
    [True, True, False, False]

    Engine noise in a group of good moves stays small with a floor (without one it would be
    as large as a blunder's):

    >>> [round(x, 2) for x in group_advantages(torch.tensor([1.0, 1.0, 0.983, 0.958]), [0] * 4, "grpo", 0.1)[0].tolist()]
    [0.15, 0.15, -0.02, -0.27]
    """
    advantages = compute_grpo_outcome_advantage(
        rewards, groups, norm_by_std=loss_type != "dr_grpo", std_floor=std_floor
    )
    keep = torch.ones_like(rewards, dtype=torch.bool)
    if loss_type == "dapo" or drop_flat:
        for g in set(groups):
            idx = [i for i, k in enumerate(groups) if k == g]
            values = rewards[idx]
            if bool((values == values[0]).all()):
                keep[idx] = False
    return advantages, keep


def group_pairs(
    rewards: Sequence[float], groups: Sequence[Hashable], completions: Sequence[Sequence[int]], margin: float
) -> list[tuple[int, int]]:
    """Online DPO's pairs: per group, the index of its best sample (chosen) and of its worst
    (rejected), when their rewards differ by at least ``margin`` and their completions differ;
    samples without a completion are left out. The first of equal rewards is taken.

    >>> group_pairs([0.9, 0.2, 0.5, 0.5, 0.51], [0, 0, 0, 1, 1], [[1], [2], [3], [4], [5]], 0.05)
    [(0, 1)]
    """
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        if completions[i]:
            members.setdefault(g, []).append(i)
    pairs = []
    for idx in members.values():
        best = max(idx, key=lambda i: rewards[i])
        worst = min(idx, key=lambda i: rewards[i])
        if rewards[best] - rewards[worst] >= margin and list(completions[best]) != list(completions[worst]):
            pairs.append((best, worst))
    return pairs


def online_dpo_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    chosen_tokens: torch.Tensor,
    beta: float,
    rpo_alpha: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO's sigmoid loss on ``(P,)`` sequence log-probs of chosen and rejected samples and their
    reference's, plus ``rpo_alpha`` times the chosen samples' NLL per token (``chosen_tokens``
    their lengths); the mean over the pairs.

    A pair the policy already ranks by more than the reference does costs less:

    >>> z = torch.zeros(2)
    >>> loss, m = online_dpo_loss(torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -1.0]), z - 1.5, z - 1.5,
    ...                           torch.ones(2), beta=1.0, rpo_alpha=0.0)
    >>> round(float(loss), 3), m["pair_accuracy"]
    (0.813, 0.5)
    """
    margin = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))
    dpo = -torch.nn.functional.logsigmoid(margin)
    nll = -chosen / chosen_tokens.clamp(min=1)
    loss = (dpo + rpo_alpha * nll).mean()
    metrics = {
        "dpo_loss": float(dpo.detach().mean()),
        "nll": float(nll.detach().mean()),
        "pair_accuracy": float((margin.detach() > 0).float().mean()),
        "reward_margin": float(margin.detach().mean()),
    }
    return loss, metrics


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: GRPOSettings,
    norm_length: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO objective on ``(bs, T)`` completion-token log-probs; ``advantages`` are per
    sample ``(bs,)``, ``mask`` marks completion tokens (rows of dropped samples all zero).

    Returns ``(loss, metrics)``: ``pg_loss``, ``kl`` (k3 to the reference, masked mean),
    ``clipfrac``, ``approx_kl``.
    """
    mode = {"grpo": "seq-mean-token-mean", "dr_grpo": "seq-mean-token-sum-norm", "dapo": "token-mean"}[
        settings.loss_type
    ]
    high = settings.clip_high if settings.loss_type == "dapo" else settings.clip
    token_adv = advantages.unsqueeze(-1).expand_as(logprobs)
    pg_loss, pg = compute_policy_loss(
        old_logprobs, logprobs, token_adv, mask, settings.clip, high, None, "token-mean"
    )
    if mode != "token-mean":  # the same per-token losses, aggregated the loss type's way
        ratio = torch.exp(torch.clamp(logprobs - old_logprobs, -20.0, 20.0))
        per_token = torch.maximum(
            -token_adv * ratio, -token_adv * torch.clamp(ratio, 1 - settings.clip, 1 + high)
        )
        pg_loss = agg_loss(per_token, mask, mode, norm_length)
    loss = pg_loss
    kl_value = 0.0
    if ref_logprobs is not None and settings.beta > 0:
        kl = kl_penalty(logprobs, ref_logprobs, settings.kl_estimator)
        loss = loss + settings.beta * agg_loss(kl, mask, mode, norm_length)
        kl_value = float(masked_mean(kl.detach(), mask)) if mask.any() else 0.0
    metrics = {
        "pg_loss": float(pg_loss.detach()),
        "kl": kl_value,
        "clipfrac": float(pg["pg_clipfrac"]),
        "approx_kl": float(pg["ppo_kl"]),
    }
    return loss, metrics


def completion_logprobs(
    model: torch.nn.Module, samples: Sequence[Sample], pad: int, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities ``(B, W)`` of each sample's completion tokens under ``model`` at the
    sampling temperature, and their mask; ``W`` is the longest completion. Only the completion
    positions go through the LM head (a GPT-2 ``transformer`` + ``lm_head``).

    When every completion is one token (a move, with the chess tokenizer) its log-probability
    depends on the prompt alone, so each distinct prompt is read once for its whole group
    instead of ``group_size`` times."""
    from chessrl.lm.models import right_padded

    width = max(1, max(len(s.completion_ids) for s in samples))
    if width == 1:
        rows_of: dict[tuple[int, ...], int] = {}
        for s in samples:
            rows_of.setdefault(tuple(s.prompt_ids), len(rows_of))
        rows = [list(r) for r in rows_of]
        which = [rows_of[tuple(s.prompt_ids)] for s in samples]
    else:
        rows = [s.prompt_ids + s.completion_ids for s in samples]
        which = list(range(len(samples)))
    device = next(model.parameters()).device
    ids, attention = right_padded(rows, pad, device)
    hidden = model.transformer(input_ids=ids, attention_mask=attention).last_hidden_state  # type: ignore[attr-defined]
    index = torch.zeros(len(samples), width, dtype=torch.long)
    targets = torch.full((len(samples), width), pad, dtype=torch.long)
    mask = torch.zeros(len(samples), width)
    for b, s in enumerate(samples):
        n = len(s.completion_ids)
        start = len(s.prompt_ids) - 1  # the position whose logits predict the first completion token
        index[b, :n] = torch.arange(start, start + n)
        targets[b, :n] = torch.tensor(s.completion_ids, dtype=torch.long)
        mask[b, :n] = 1.0
    index, targets, mask = index.to(device), targets.to(device), mask.to(device)
    picked = hidden[torch.tensor(which, dtype=torch.long, device=device)[:, None], index]  # (B, W, H)
    logits = model.lm_head(picked).float() / max(temperature, 1e-6)  # type: ignore[attr-defined]
    logprobs = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logprobs * mask, mask


def masked_completion_logprobs(
    model: torch.nn.Module, samples: Sequence[Sample], pad: int, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For masked samples (one move token each, drawn from the legal moves): the log-probability
    ``(B, 1)`` of each move under the masked policy at ``temperature`` — the same distribution
    the sampler drew from — its mask, and ``-log P(legal)`` ``(B,)`` under the full vocabulary
    (at temperature 1: the model's own legality). Each distinct prompt is read once."""
    from chessrl.lm.masked import legal_nll, masked_log_softmax, pad_ids
    from chessrl.lm.models import right_padded

    rows_of: dict[tuple[int, ...], int] = {}
    for s in samples:
        rows_of.setdefault(tuple(s.prompt_ids), len(rows_of))
    rows = [list(r) for r in rows_of]
    device = next(model.parameters()).device
    which = torch.tensor([rows_of[tuple(s.prompt_ids)] for s in samples], dtype=torch.long, device=device)
    ids, attention = right_padded(rows, pad, device)
    hidden = model.transformer(input_ids=ids, attention_mask=attention).last_hidden_state  # type: ignore[attr-defined]
    last = torch.tensor([len(r) - 1 for r in rows], dtype=torch.long, device=device)
    logits = model.lm_head(hidden[torch.arange(len(rows), device=device), last]).float()[which]  # type: ignore[attr-defined]
    legal = pad_ids([s.legal_ids or [] for s in samples], device)
    logp = masked_log_softmax(logits, legal, temperature)
    chosen = torch.tensor(
        [(s.legal_ids or []).index(s.completion_ids[0]) for s in samples], dtype=torch.long, device=device
    )
    picked = logp.gather(-1, chosen[:, None])
    return picked, torch.ones_like(picked), legal_nll(logits, legal)
