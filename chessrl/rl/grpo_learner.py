"""GRPO's learner side, Ray-free: one optimizer step on a batch of scored groups, with the
clipped group-relative loss (``loss_type`` grpo / dr_grpo / dapo) or online DPO on each group's
best and worst (``dpo``), the legality term of masked samples, and the data-parallel step.
:mod:`chessrl.rl.grpo` samples and scores the groups; the losses and log-probabilities are
:mod:`chessrl.rl.grpo_loss`. Usage (``pipelines/learner/grpo.py`` does this each iteration)::

    samples = sample_groups(policy, tokenizer, prompts, settings, max_new_tokens)
    score_samples(samples, scores, settings)
    metrics = grpo_update(policy, reference, optimizer, samples, pad, settings)

:func:`grpo_update` and :func:`online_dpo_update` are also importable from :mod:`chessrl.rl.grpo`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from chessrl.rl.grpo_loss import (
    completion_logprobs,
    group_advantages,
    group_pairs,
    grpo_loss,
    masked_completion_logprobs,
    online_dpo_loss,
)
from chessrl.rl.grpo_types import GRPOSettings, Sample
from chessrl.rl.policy_gradient import kl_penalty, masked_mean

_GRPO_METRICS = ("pg_loss", "kl", "clipfrac", "approx_kl")
_DPO_METRICS = ("dpo_loss", "nll", "pair_accuracy", "reward_margin")


def grpo_update(
    policy: torch.nn.Module,
    reference: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    pad: int,
    settings: GRPOSettings,
    *,
    minibatch: int = 64,
    norm_length: int | None = None,
    max_grad_norm: float = 1.0,
    reduce: Callable[[torch.nn.Module, float], float] | None = None,
) -> dict[str, float]:
    """One optimizer step on a batch of groups (on-policy: the old log-probs are the current
    ones, detached, so the ratio is 1 and the clip guards only against a step that goes far);
    gradients accumulated over minibatches, weighted by their share of the loss's normaliser.

    ``reduce`` (several data-parallel workers, :func:`chessrl.rl.data_parallel.average_gradients`)
    averages the gradients over the workers before the step and returns what all of them
    trained on; every worker calls it each update, one whose groups were all flat included, so
    all take the same step (none when no worker had anything to learn).

    ``loss_type`` ``dpo``: :func:`online_dpo_update` instead."""
    if settings.loss_type == "dpo":
        return online_dpo_update(
            policy,
            reference,
            optimizer,
            samples,
            pad,
            settings,
            minibatch=minibatch,
            max_grad_norm=max_grad_norm,
            reduce=reduce,
        )
    advantages, used = _trained_samples(samples, settings)
    masked, legality = _legality_prompts(samples, settings)
    metrics: dict[str, float] = dict.fromkeys(_GRPO_METRICS, 0.0)
    if legality:
        metrics["legal_nll"] = 0.0
    if not used and not legality and reduce is None:
        return {**metrics, "trained_samples": 0.0, "grad_norm": 0.0}
    tokens = sum(len(samples[i].completion_ids) for i in used)
    policy.train(False)  # dropout off: the ratio compares the same function
    optimizer.zero_grad(set_to_none=True)
    for start in range(0, len(used), minibatch):
        part = used[start : start + minibatch]
        got = _grpo_minibatch(
            policy,
            reference,
            [samples[i] for i in part],
            advantages[part],
            pad,
            settings,
            norm_length,
            tokens,
            len(used),
        )
        for key in _GRPO_METRICS:
            metrics[key] += got[key]
    if legality:
        metrics["legal_nll"] = legality_backward(policy, samples, masked, pad, settings, minibatch)
    # the loss is a mean over sequences (dapo: tokens); with nothing to learn but legality, over its prompts
    work = (
        float(tokens if settings.loss_type == "dapo" else len(used))
        if used
        else float(legality and len(masked))
    )
    return step_with(policy, optimizer, work, reduce, max_grad_norm, metrics, trained=float(len(used)))


def _trained_samples(samples: Sequence[Sample], settings: GRPOSettings) -> tuple[torch.Tensor, list[int]]:
    """The group advantages of ``samples`` and the indices of those trained on (kept by the loss
    type, with a completion), shortest prompt and completion first."""
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    groups = [s.group for s in samples]
    advantages, keep = group_advantages(
        rewards, groups, settings.loss_type, settings.std_floor, settings.drop_flat
    )
    used = [i for i in range(len(samples)) if bool(keep[i]) and samples[i].completion_ids]
    # minibatches of similar lengths: a 2-token policy answer padded to a 128-token environment
    # answer's width would pay for it in every forward and backward pass
    used.sort(key=lambda i: len(samples[i].prompt_ids) + len(samples[i].completion_ids))
    return advantages, used


def _legality_prompts(samples: Sequence[Sample], settings: GRPOSettings) -> tuple[list[int], bool]:
    """The indices of the masked samples and whether the legality term is on (``legal_weight``
    above 0 and some sample masked)."""
    masked = [i for i in range(len(samples)) if samples[i].legal_ids is not None]
    return masked, settings.legal_weight > 0 and bool(masked)


def _scored(
    policy: torch.nn.Module,
    reference: torch.nn.Module | None,
    batch: Sequence[Sample],
    pad: int,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The policy's per-token log-probs of ``batch``'s completions (masked samples: under the
    legal moves alone, as the sampler drew them; scorer samples: under the scorer policy), their mask, and the reference's (no grad; None
    without a ``reference``)."""
    from chessrl.rl.grpo_scorer import scorer_completion_logprobs

    score = (
        scorer_completion_logprobs
        if batch[0].move_rows is not None
        else masked_completion_logprobs
        if batch[0].legal_ids is not None
        else completion_logprobs
    )
    logprobs, mask, *_ = score(policy, batch, pad, temperature)
    ref = None
    if reference is not None:
        with torch.no_grad():
            ref, *_ = score(reference, batch, pad, temperature)
    return logprobs, mask, ref


def _grpo_minibatch(
    policy: torch.nn.Module,
    reference: torch.nn.Module | None,
    batch: Sequence[Sample],
    advantages: torch.Tensor,
    pad: int,
    settings: GRPOSettings,
    norm_length: int | None,
    tokens: int,
    used: int,
) -> dict[str, float]:
    """One minibatch's :func:`grpo_loss` backpropagated, weighted by its share of the update's
    ``tokens`` (dapo) or ``used`` sequences (the others); its metrics weighted alike."""
    logprobs, mask, ref = _scored(
        policy, reference if settings.beta > 0 else None, batch, pad, settings.temperature
    )
    loss, m = grpo_loss(
        logprobs,
        logprobs.detach(),
        ref,
        advantages.to(logprobs.device),
        mask,
        settings,
        norm_length,
    )
    share = (
        float(mask.sum()) / tokens if settings.loss_type == "dapo" else len(batch) / used
    )  # token-mean weighs by tokens, the per-sequence modes by sequences
    (loss * share).backward()
    return {key: m[key] * share for key in _GRPO_METRICS}


def step_with(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    work: float,
    reduce: Callable[[torch.nn.Module, float], float] | None,
    max_grad_norm: float,
    metrics: dict[str, float],
    *,
    trained: float,
) -> dict[str, float]:
    """The end of an update whose gradients are accumulated: averaged over the workers by
    ``reduce`` (no step anywhere when no worker had ``work``), clipped, one optimizer step; the
    metrics with ``trained_samples`` and ``grad_norm``."""
    if reduce is not None and reduce(policy, work) == 0:
        return {**metrics, "trained_samples": 0.0, "grad_norm": 0.0}
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    return {**metrics, "trained_samples": trained, "grad_norm": float(grad_norm)}


def legality_backward(
    policy: torch.nn.Module,
    samples: Sequence[Sample],
    masked: Sequence[int],
    pad: int,
    settings: GRPOSettings,
    minibatch: int,
) -> float:
    """The legality term's gradient (``legal_weight`` times ``-log P(legal)``), once per distinct
    masked prompt (flat groups included: legality is learnt wherever the policy was asked), and
    its mean."""
    firsts = list({tuple(samples[i].prompt_ids): i for i in masked}.values())
    total = 0.0
    for start in range(0, len(firsts), minibatch):
        batch = [samples[i] for i in firsts[start : start + minibatch]]
        _, _, nll = masked_completion_logprobs(policy, batch, pad, settings.temperature)
        (settings.legal_weight * nll.sum() / len(firsts)).backward()
        total += float(nll.detach().sum()) / len(firsts)
    return total


def online_dpo_update(
    policy: torch.nn.Module,
    reference: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    pad: int,
    settings: GRPOSettings,
    *,
    minibatch: int = 64,
    max_grad_norm: float = 1.0,
    reduce: Callable[[torch.nn.Module, float], float] | None = None,
) -> dict[str, float]:
    """One online DPO step (``loss_type`` ``dpo``) on a batch of groups of the current policy's
    samples: each group's best and worst, ``pair_margin`` apart (:func:`group_pairs`), a
    chosen/rejected pair; DPO's loss (``dpo_beta``) against the frozen ``reference`` plus the RPO anchor
    (:func:`chessrl.rl.grpo_loss.online_dpo_loss`), the mean over the pairs, gradients
    accumulated over minibatches of pairs; the legality term as :func:`grpo_update`'s. Log-probs
    are the sampler's (masked samples: under the legal moves alone). ``reduce`` as in
    :func:`grpo_update` (the work is the pairs)."""
    if reference is None:
        raise ValueError("online DPO needs the frozen reference")
    pairs = group_pairs(
        [s.reward for s in samples],
        [s.group for s in samples],
        [s.completion_ids for s in samples],
        settings.pair_margin,
    )
    masked, legality = _legality_prompts(samples, settings)
    metrics: dict[str, float] = {
        **dict.fromkeys(_GRPO_METRICS + _DPO_METRICS, 0.0),
        "pairs": float(len(pairs)),
    }
    if legality:
        metrics["legal_nll"] = 0.0
    if not pairs and not legality and reduce is None:
        return {**metrics, "trained_samples": 0.0, "grad_norm": 0.0}
    policy.train(False)
    optimizer.zero_grad(set_to_none=True)
    for part in _pair_chunks(samples, pairs, max(1, minibatch // 2)):
        got = _dpo_minibatch(policy, reference, samples, part, pad, settings, len(pairs))
        for key in ("kl", *_DPO_METRICS):
            metrics[key] += got[key]
    metrics["pg_loss"] = metrics["dpo_loss"]
    if legality:
        metrics["legal_nll"] = legality_backward(policy, samples, masked, pad, settings, minibatch)
    # the loss is a mean over pairs (about one a group); with nothing to learn but legality, over
    # its distinct prompts (one a group), so such a worker does not outweigh the others
    prompts = len({tuple(samples[i].prompt_ids) for i in masked})
    work = float(len(pairs)) if pairs else float(legality and prompts)
    return step_with(policy, optimizer, work, reduce, max_grad_norm, metrics, trained=float(2 * len(pairs)))


def _pair_chunks(
    samples: Sequence[Sample], pairs: Sequence[tuple[int, int]], half: int
) -> list[list[tuple[int, int]]]:
    """``pairs`` cut into minibatches of at most ``half`` pairs, the masked (policy) pairs first:
    masked and unmasked (environment) pairs are scored differently, so never in one minibatch."""
    kinds = [
        [p for p in pairs if (samples[p[0]].legal_ids is not None) == masked_kind]
        for masked_kind in (True, False)
    ]
    return [kind[start : start + half] for kind in kinds for start in range(0, len(kind), half)]


def _dpo_minibatch(
    policy: torch.nn.Module,
    reference: torch.nn.Module,
    samples: Sequence[Sample],
    part: Sequence[tuple[int, int]],
    pad: int,
    settings: GRPOSettings,
    pairs: int,
) -> dict[str, float]:
    """One minibatch of chosen/rejected pairs: :func:`online_dpo_loss` backpropagated, weighted
    by its share of the update's ``pairs``; its metrics and the KL to the reference weighted alike."""
    batch = [samples[c] for c, _ in part] + [samples[r] for _, r in part]
    logprobs, mask, ref = _scored(policy, reference, batch, pad, settings.temperature)
    assert ref is not None
    seq, ref_seq = (logprobs * mask).sum(-1), (ref * mask).sum(-1)
    n = len(part)
    loss, m = online_dpo_loss(
        seq[:n],
        seq[n:],
        ref_seq[:n],
        ref_seq[n:],
        mask[:n].sum(-1),
        settings.dpo_beta,
        settings.rpo_alpha,
    )
    share = n / pairs
    (loss * share).backward()
    with torch.no_grad():
        kl = kl_penalty(logprobs, ref, settings.kl_estimator)
    return {"kl": float(masked_mean(kl, mask)) * share, **{key: m[key] * share for key in _DPO_METRICS}}
