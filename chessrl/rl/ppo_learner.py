"""PPO's learner side, Ray-free: the log-probabilities and values of recorded actions, their
rewards, GAE over each episode, and the clipped update (:mod:`chessrl.rl.ppo` plays the
episodes that record them). The learner adds the reference policy's log-probability and the
critic's value to each action, then (OpenRLHF's ``compute_reward``, veRL's GAE)::

    r_t = score_t - kl_coef * (logprob_t - ref_logprob_t)         (k1, per action)
    score_t -= mean of the batch's legal scores                    (center_scores), or, with k moves
    score_t -= mean score of the other k - 1 drawn in its position  (samples_per_state: RLOO)
    r_t = illegal_penalty                                          (an illegal move: the episode ends)
    r_T += result_weight * result                                  (+1 / 0 / -1 from the policy's side)
    A, R = GAE(r, V; gamma, lam) ; A whitened ; R = A_raw + V

and takes ``ppo_epochs`` passes of clipped-surrogate and clipped-value minibatch steps
(:mod:`chessrl.rl.policy_gradient`), the policy's loss plus ``anchor_coef`` times the NLL of
each position's best-graded drawn move (k moves a position: RPO's anchor). The forward passes
that give the log-probabilities, entropies and values are :mod:`chessrl.rl.ppo_forward`.

>>> from chessrl.rl.ppo import PPOSettings
>>> s = PPOSettings(kl_coef=0.1)
>>> action_rewards([0.5, 1.0], [True, True], [-1.0, -1.2], [-1.1, -1.0], s, result=0.0)
[0.49, 1.02]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from chessrl.lm.legality import MoveTokens
from chessrl.rl.policy_gradient import (
    compute_gae_advantage_return,
    compute_policy_loss,
    compute_value_loss,
    explained_variance,
    masked_mean,
)
from chessrl.rl.ppo_forward import action_logprobs as action_logprobs  # re-exported: callers
from chessrl.rl.ppo_forward import action_terms, reference_logprobs, state_values, unique_rows
from chessrl.rl.ppo_forward import last_token_logits as last_token_logits
from chessrl.rl.ppo_types import Action, PPOSettings
from chessrl.rl.reward import score_ids


def action_rewards(
    scores: Sequence[float],
    legal: Sequence[bool],
    logprobs: Sequence[float],
    ref_logprobs: Sequence[float],
    settings: PPOSettings,
    result: float,
) -> list[float]:
    """The rewards of one episode's actions: the normalised score minus ``kl_coef`` times the k1
    KL (behaviour log-prob minus the reference's), the penalty for an illegal move, the result
    (times ``result_weight``) on the last action. See the module docstring's example."""
    out = []
    for score, ok, lp, ref in zip(scores, legal, logprobs, ref_logprobs, strict=True):
        kl = lp - ref
        out.append((score if ok else settings.illegal_penalty) - settings.kl_coef * kl)
    if out:
        out[-1] += settings.result_weight * result
    return [round(r, 12) for r in out]


@dataclass
class Batch:
    """One iteration's experience as flat tensors over its N actions (episode order kept)."""

    rows: list[list[int]]
    actions: torch.Tensor  # (N,) token ids
    old_logprobs: torch.Tensor  # (N,)
    advantages: torch.Tensor  # (N,) whitened
    returns: torch.Tensor  # (N,)
    old_values: torch.Tensor  # (N,)
    rewards: torch.Tensor  # (N,)
    kl: torch.Tensor  # (N,) k1 to the reference
    legal: torch.Tensor  # (N,) bool
    legal_ids: torch.Tensor | None = None  # (N, W) legal move token ids of each position, -1 padded
    masked: bool = False  # log-probs are the masked policy's (over legal_ids)
    score_mean: float = (
        0.0  # the legal moves' mean score before centring (the reward model's or Stockfish's grade)
    )
    grouped: bool = False  # several moves drawn a position (samples_per_state): minibatches keep a prompt's moves together
    best: torch.Tensor | None = None  # (N,) bool: the best-graded move drawn in its position (grouped only)


def make_batch(
    actions: Sequence[Action],
    policy_ref: Any,
    critic: Any,
    pad_id: int,
    settings: PPOSettings,
    chunk: int = 64,
    moves_table: MoveTokens | None = None,
    sums: Callable[[Sequence[float]], list[float]] | None = None,
) -> Batch:
    """Reference log-probs and values for every action (no grad), the per-action rewards, and
    GAE over each episode's actions (returns before whitening, advantages whitened over all).

    Data-parallel workers, each with its share of the episodes, pass ``sums``
    (:func:`chessrl.rl.data_parallel.sum_over_workers`): the scores' centre and the advantages'
    mean and variance are then the whole iteration's, as one worker would compute them."""
    legal_scores = [s for a in actions if a.legal for s in (a.score, *a.alt_scores)]
    total, count = (sums or list)([sum(legal_scores), float(len(legal_scores))])
    score_mean = total / count if count else 0.0
    grouped = any(a.alt_ids for a in actions)
    if grouped and settings.gamma > 0:
        raise ValueError(
            f"moves drawn beside the played one (samples_per_state > 1) are one-move episodes: gamma must be 0, "
            f"not {settings.gamma:g}"
        )
    shift = score_mean if settings.center_scores and not grouped else 0.0
    best_keys: set[tuple[str, int]] = set()
    if grouped:
        best_keys = best_drawn(actions)
        actions = leave_one_out(actions)
    by_episode: dict[str, list[Action]] = {}
    for a in actions:
        by_episode.setdefault(a.episode, []).append(a)
    episodes = [sorted(v, key=lambda a: a.t) for v in by_episode.values()]
    flat = [a for ep in episodes for a in ep]
    rows = [a.prompt_ids for a in flat]
    tokens = torch.tensor([a.action_id for a in flat])
    legal_ids = _legal_ids(flat, moves_table)
    if settings.masked and legal_ids is None:
        raise ValueError("masked PPO needs the move tokens (moves_table) to list each position's legal moves")
    ref = reference_logprobs(
        policy_ref, rows, tokens, pad_id, settings, legal_ids if settings.masked else None, chunk
    )
    unique, index = unique_rows(rows)
    values = torch.tensor(score_ids(critic, unique, pad_id, chunk))[torch.tensor(index, dtype=torch.long)]
    old = torch.tensor([a.logprob for a in flat])
    rewards, vals, mask = _episode_matrices(episodes, shift, old, ref, values, settings)
    if sums is None:
        advantages, returns = compute_gae_advantage_return(
            rewards, vals, mask, settings.gamma, settings.lam, int(mask.sum()) >= 2
        )
    else:
        advantages, returns = compute_gae_advantage_return(
            rewards, vals, mask, settings.gamma, settings.lam, False
        )
        advantages = whiten_over(advantages, mask, sums)
    keep = mask.bool()
    return Batch(
        rows=rows,
        actions=tokens,
        old_logprobs=old,
        advantages=advantages[keep],
        returns=returns[keep],
        old_values=values,
        rewards=rewards[keep],
        kl=old - ref,
        legal=torch.tensor([a.legal for a in flat]),
        legal_ids=legal_ids,
        masked=settings.masked,
        score_mean=score_mean,
        grouped=grouped,
        best=torch.tensor([(a.episode, a.t) in best_keys for a in flat]) if grouped else None,
    )


def _episode_matrices(
    episodes: Sequence[Sequence[Action]],
    shift: float,
    old: torch.Tensor,
    ref: torch.Tensor,
    values: torch.Tensor,
    settings: PPOSettings,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(episodes, T)`` rewards (:func:`action_rewards`, scores less ``shift``), values and the
    mask of real actions, from the flat per-action ``old``, ``ref`` and ``values`` in episode order."""
    width = max(len(ep) for ep in episodes)
    rewards = torch.zeros(len(episodes), width)
    vals = torch.zeros(len(episodes), width)
    mask = torch.zeros(len(episodes), width)
    position = 0
    for e, ep in enumerate(episodes):
        n = len(ep)
        got = action_rewards(
            [a.score - shift for a in ep],
            [a.legal for a in ep],
            old[position : position + n].tolist(),
            ref[position : position + n].tolist(),
            settings,
            ep[-1].result,
        )
        rewards[e, :n] = torch.tensor(got)
        vals[e, :n] = values[position : position + n]
        mask[e, :n] = 1
        position += n
    return rewards, vals, mask


def leave_one_out(actions: Sequence[Action]) -> list[Action]:
    """Actions with moves drawn beside them (``alt_ids``, ``samples_per_state`` > 1) as one
    action per drawn move, each scored against the mean score of the others drawn in the same
    position (RLOO's leave-one-out baseline): the played move keeps its place in its episode, the
    others become one-move episodes (named ``<episode>/<t>.<j>``). Actions without others are
    returned unchanged.

    >>> a = Action("g", 0, [1, 7], 9, "e2e4", True, -1.0, 0, score=1.0, alt_ids=[8, 6],
    ...            alt_logprobs=[-2.0, -0.5], alt_scores=[0.0, 0.5])
    >>> [(b.episode, b.action_id, b.score) for b in leave_one_out([a])]
    [('g', 9, 0.75), ('g/0.0', 8, -0.75), ('g/0.1', 6, 0.0)]
    """
    out: list[Action] = []
    for a in actions:
        if not a.alt_ids:
            out.append(a)
            continue
        grades = [a.score, *a.alt_scores]
        total, k = sum(grades), len(grades)
        out.append(
            replace(
                a, score=a.score - (total - a.score) / (k - 1), alt_ids=[], alt_logprobs=[], alt_scores=[]
            )
        )
        for j, (token, logprob, grade) in enumerate(
            zip(a.alt_ids, a.alt_logprobs, a.alt_scores, strict=True)
        ):
            out.append(
                Action(
                    f"{a.episode}/{a.t}.{j}",
                    0,
                    a.prompt_ids,
                    token,
                    "",
                    True,
                    logprob,
                    a.version,
                    score=grade - (total - grade) / (k - 1),
                    last=True,
                    opponent=a.opponent,
                    legal_ids=a.legal_ids,
                )
            )
    return out


def best_drawn(actions: Sequence[Action]) -> set[tuple[str, int]]:
    """The ``(episode, t)`` of the best-graded move of each position where several were drawn, as
    :func:`leave_one_out` names them (the played move keeps its own; the ``j``-th other is
    ``(<episode>/<t>.<j>, 0)``); a tie for the best goes to the earlier drawn, and a position
    whose drawn moves all grade alike has none (nothing to learn there).

    >>> a = Action("g", 3, [1, 7], 9, "e2e4", True, -1.0, 0, score=0.2, alt_ids=[8, 6],
    ...            alt_logprobs=[-2.0, -0.5], alt_scores=[0.9, 0.5])
    >>> best_drawn([a]), best_drawn([replace(a, score=0.9)]), best_drawn([replace(a, score=0.5, alt_scores=[0.5, 0.5])])
    ({('g/3.0', 0)}, {('g', 3)}, set())
    """
    out: set[tuple[str, int]] = set()
    for a in actions:
        if not a.alt_ids:
            continue
        grades = [a.score, *a.alt_scores]
        if max(grades) == min(grades):
            continue
        j = max(range(len(grades)), key=lambda i: (grades[i], -i))
        out.add((a.episode, a.t) if j == 0 else (f"{a.episode}/{a.t}.{j - 1}", 0))
    return out


def _legal_ids(flat: Sequence[Action], moves_table: MoveTokens | None) -> torch.Tensor | None:
    """``(N, W)`` legal move tokens of each action's position: as the collector recorded them,
    or (a shard without them) listed from the prompt's moves; None without either."""
    if flat and all(a.legal_ids for a in flat):
        from chessrl.lm.masked import pad_ids

        return pad_ids([a.legal_ids for a in flat])
    if moves_table is None:
        return None
    return legal_move_ids([a.prompt_ids for a in flat], [a.action_id for a in flat], moves_table)


def whiten_over(
    advantages: torch.Tensor, mask: torch.Tensor, sums: Callable[[Sequence[float]], list[float]]
) -> torch.Tensor:
    """``advantages`` whitened with the mean and unbiased variance of every worker's (``sums``
    adds each worker's count, sum and sum of squares), 0 where ``mask`` is not set; unchanged
    when all workers together have fewer than two.

    >>> adv = torch.tensor([[1.0, 3.0, 0.0]]); mask = torch.tensor([[1.0, 1.0, 0.0]])
    >>> whiten_over(adv, mask, list).tolist()   # one worker: (x - 2) / 1.414
    [[-0.7071067690849304, 0.7071067690849304, 0.0]]
    """
    from chessrl.rl.policy_gradient import WHITEN_EPS

    n, total, squares = sums(
        [float(mask.sum()), float((advantages * mask).sum()), float((advantages * advantages * mask).sum())]
    )
    if n < 2:
        return advantages
    mean = total / n
    var = max(squares - n * mean * mean, 0.0) / (n - 1)
    return torch.where(mask.bool(), (advantages - mean) * (var + WHITEN_EPS) ** -0.5, 0.0)


def legal_move_ids(
    rows: Sequence[Sequence[int]], actions: Sequence[int], moves_table: MoveTokens
) -> torch.Tensor:
    """``(N, W)`` token ids of the legal moves after each prompt (``-1`` padded), in the form
    (space or not) of the action's token; a row whose action is not a move token has none."""
    from chessrl.lm.legality import legal_move_targets, pad_legal_targets

    flats, counts = [], []
    for row, action in zip(rows, actions, strict=True):
        flat, count = legal_move_targets([*row, action], moves_table, start_id=row[0])
        n = count[len(row) - 1]
        flats.append(flat[len(flat) - n :] if n else [])
        counts.append([n])
    return torch.from_numpy(pad_legal_targets(flats, counts)[:, 0, :])


def ppo_update(
    policy: Any,
    critic: Any,
    policy_opt: torch.optim.Optimizer | None,
    critic_opt: torch.optim.Optimizer,
    batch: Batch,
    pad_id: int,
    settings: PPOSettings,
    generator: torch.Generator,
    *,
    minibatches: int | None = None,
    reduce: Callable[[Any, float], float] | None = None,
) -> dict[str, float]:
    """``ppo_epochs`` passes of shuffled minibatches: the clipped surrogate (token-mean over the
    minibatch's actions; no policy step when ``policy_opt`` is None: critic warm-up) and the
    clipped value loss. Returns the mean of each diagnostic over the minibatch steps.

    Several data-parallel workers (each with its share of the iteration's episodes) pass
    ``reduce`` (:func:`chessrl.rl.data_parallel.average_gradients`: gradients averaged before
    each step) and ``minibatches``, the busiest worker's count of minibatches an epoch: every
    worker cuts its actions into that many (some possibly empty: it sends zeros and steps with
    the others), so all take the same steps."""
    n = len(batch.rows)
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}  # steps that measured each (anchor_nll: only those with a best move)
    index = unique_rows(batch.rows)[1] if batch.grouped else list(range(n))
    groups: list[list[int]] = [[] for _ in range(max(index, default=-1) + 1)]
    for i, g in enumerate(index):
        groups[g].append(i)
    for _ in range(settings.ppo_epochs):
        if len(groups) == n:
            order = torch.randperm(n, generator=generator).tolist()
        else:  # the actions of one prompt kept together: one forward pass serves them in a minibatch
            order = [i for g in torch.randperm(len(groups), generator=generator).tolist() for i in groups[g]]
        if minibatches is None:
            parts = [order[i : i + settings.minibatch] for i in range(0, n, settings.minibatch)]
        else:
            cuts = [round(k * n / minibatches) for k in range(minibatches + 1)]
            parts = [order[cuts[k] : cuts[k + 1]] for k in range(minibatches)]
        for idx in parts:
            part = _Minibatch(batch, idx, pad_id, settings, reduce)
            if not idx:
                part.sync_only(policy if policy_opt is not None else None, policy_opt, critic, critic_opt)
                continue
            metrics: dict[str, float] = {}
            if policy_opt is not None:
                metrics.update(part.policy_step(policy, policy_opt))
            metrics.update(part.critic_step(critic, critic_opt))
            for k, v in metrics.items():
                totals[k] = totals.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
    out = {k: v / counts[k] for k, v in totals.items()}
    legal = batch.legal.float()
    out.update(
        reward_mean=batch.rewards.mean().item(),
        kl_to_ref=batch.kl.mean().item(),
        legal_rate=legal.mean().item(),
        explained_variance=float(
            explained_variance(batch.old_values.view(1, -1), batch.returns.view(1, -1), torch.ones(1, n))
        ),
        actions=float(n),
        legal_reward_mean=float(masked_mean(batch.rewards, batch.legal.float())) if n else 0.0,
        score_mean=batch.score_mean,
    )
    return out


def ppo_policy_loss(
    logprob: torch.Tensor,
    entropy: torch.Tensor,
    raw_logits: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    settings: PPOSettings,
    *,
    best: torch.Tensor | None = None,
    legal_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's policy loss over a minibatch of actions (one move each), the whole of it in one place:

        loss = clipped surrogate (veRL's ``compute_policy_loss``, clip ``settings.clip``)
             - entropy_coef * mean entropy
             + anchor_coef * NLL of the best move drawn in each position (``best``; RPO's anchor)
             + legal_coef * legal-move loss of the unmasked logits (``legal_ids``)

    ``logprob``, ``old_logprob``, ``advantages`` and ``entropy`` hold one value an action;
    ``raw_logits`` the unmasked next-token logits the legal term reads. Returns the loss and its
    diagnostics (``pg_loss``, ``clipfrac``, ``approx_kl``, ``entropy``, and ``anchor_nll``,
    ``legal_loss``, ``legal_mass`` where those terms are on). The KL to the start is in the
    reward (:func:`action_rewards`), not here.

    >>> s = PPOSettings(entropy_coef=0.0, legal_coef=0.0)
    >>> lp = torch.tensor([-1.0, -2.0])
    >>> loss, m = ppo_policy_loss(lp, torch.zeros(2), torch.zeros(2, 4), lp, torch.tensor([1.0, -1.0]), s)
    >>> round(loss.item(), 4), m["clipfrac"]   # ratio 1: the surrogate is -mean(advantage)
    (0.0, 0.0)
    """
    n = logprob.shape[0]
    pg_loss, pg_metrics = compute_policy_loss(
        old_logprob.view(-1, 1),
        logprob.view(-1, 1),
        advantages.view(-1, 1),
        torch.ones(n, 1, device=logprob.device),
        clip_ratio_low=settings.clip,
    )
    loss = pg_loss - settings.entropy_coef * entropy.mean()
    metrics: dict[str, float] = {}
    if settings.anchor_coef > 0 and best is not None and bool(best.any()):
        anchor = -logprob[best].mean()
        loss = loss + settings.anchor_coef * anchor
        metrics.update(anchor_nll=anchor.item())
    if settings.legal_coef > 0 and legal_ids is not None:
        from chessrl.lm.legality import legal_move_loss

        legal_loss, mass = legal_move_loss(raw_logits.unsqueeze(1), legal_ids.unsqueeze(1))
        loss = loss + settings.legal_coef * legal_loss
        metrics.update(legal_loss=legal_loss.item(), legal_mass=mass.item())
    metrics.update(
        pg_loss=pg_loss.item(),
        clipfrac=float(pg_metrics["pg_clipfrac"]),
        approx_kl=float(pg_metrics["ppo_kl"]),
        entropy=entropy.mean().item(),
    )
    return loss, metrics


class _Minibatch:
    """One minibatch of :func:`ppo_update`: the batch's actions ``idx``, and a step of each model on them."""

    def __init__(
        self,
        batch: Batch,
        idx: list[int],
        pad_id: int,
        settings: PPOSettings,
        reduce: Callable[[Any, float], float] | None = None,
    ) -> None:
        self.batch, self.idx, self.pad_id, self.settings, self.reduce = batch, idx, pad_id, settings, reduce
        self.rows = [batch.rows[j] for j in idx]
        self.mask = torch.ones(len(idx), 1)

    def step(self, model: Any, opt: torch.optim.Optimizer) -> None:
        """The gradients averaged over the workers (with ``reduce``), clipped, one step; no step
        when no worker had actions in this minibatch."""
        if self.reduce is not None and self.reduce(model, float(len(self.idx))) == 0:
            return
        torch.nn.utils.clip_grad_norm_(model.parameters(), self.settings.max_grad_norm)
        opt.step()

    def sync_only(
        self,
        policy: Any,
        policy_opt: torch.optim.Optimizer | None,
        critic: Any,
        critic_opt: torch.optim.Optimizer,
    ) -> None:
        """An empty minibatch of a data-parallel worker: no loss, zero gradients sent, the others'
        average stepped, policy then critic as the others do."""
        if policy is not None and policy_opt is not None:
            policy_opt.zero_grad()
            self.step(policy, policy_opt)
        critic_opt.zero_grad()
        self.step(critic, critic_opt)

    def policy_step(self, policy: Any, policy_opt: torch.optim.Optimizer) -> dict[str, float]:
        """One optimiser step of the policy on :func:`ppo_policy_loss`; returns its diagnostics."""
        batch, idx, settings = self.batch, self.idx, self.settings
        # fp32 as the collectors' old log-probs are, even under the learner's bf16 autocast: the ratio is 1 at the first step
        with torch.autocast(next(policy.parameters()).device.type, enabled=False):
            logprob, entropy, raw = action_terms(
                policy,
                self.rows,
                batch.actions[idx],
                self.pad_id,
                settings.temperature,
                batch.legal_ids[idx] if batch.masked and batch.legal_ids is not None else None,
            )
        best = batch.best[idx].to(logprob.device) if batch.best is not None else None
        legal_ids = batch.legal_ids[idx].to(raw.device) if batch.legal_ids is not None else None
        loss, metrics = ppo_policy_loss(
            logprob,
            entropy,
            raw,
            batch.old_logprobs[idx].to(logprob.device),
            batch.advantages[idx].to(logprob.device),
            settings,
            best=best,
            legal_ids=legal_ids,
        )
        policy_opt.zero_grad()
        loss.backward()
        self.step(policy, policy_opt)
        return metrics

    def critic_step(self, critic: Any, critic_opt: torch.optim.Optimizer) -> dict[str, float]:
        """One optimiser step of the critic: the clipped value loss."""
        batch, idx, mask = self.batch, self.idx, self.mask
        # fp32 as make_batch's old values are, even under the learner's bf16 autocast: the value
        # clip compares like with like
        with torch.autocast(next(critic.parameters()).device.type, enabled=False):
            values = state_values(critic, self.rows, self.pad_id)
        vf_loss, vf_clipfrac = compute_value_loss(
            values.view(-1, 1),
            batch.returns[idx].view(-1, 1).to(values.device),
            batch.old_values[idx].view(-1, 1).to(values.device),
            mask.to(values.device),
            cliprange_value=self.settings.value_clip,
        )
        critic_opt.zero_grad()
        vf_loss.backward()
        self.step(critic, critic_opt)
        return {"value_loss": vf_loss.item(), "value_clipfrac": float(vf_clipfrac)}
