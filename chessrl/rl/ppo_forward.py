"""PPO's forward passes over one-token actions, Ray-free: the next-token logits at the end of
each prompt (each distinct prompt read once), the log-probability and entropy of each action
(masked: over the position's legal moves alone), the critic's value of each state, and the
frozen reference's log-probabilities in chunks. :mod:`chessrl.rl.ppo` samples moves from the
logits; :mod:`chessrl.rl.ppo_learner` builds its batches and steps on the others::

    logprob, entropy, raw = action_terms(policy, rows, actions, pad_id, temperature, legal_ids)
    values = state_values(critic, rows, pad_id)

Every public name here is also importable from :mod:`chessrl.rl.ppo_learner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from chessrl.lm.models import right_padded
from chessrl.rl.ppo_types import PPOSettings


def unique_rows(rows: Sequence[Sequence[int]]) -> tuple[list[Sequence[int]], list[int]]:
    """The distinct rows (first appearance order) and each row's index among them: the ``k``
    moves drawn in one position share its prompt, so one forward pass serves them all.

    >>> unique_rows([[1, 2], [3], [1, 2]])
    ([[1, 2], [3]], [0, 1, 0])
    """
    first: dict[tuple[int, ...], int] = {}
    unique: list[Sequence[int]] = []
    index = []
    for row in rows:
        key = tuple(row)
        if key not in first:
            first[key] = len(unique)
            unique.append(row)
        index.append(first[key])
    return unique, index


def last_token_logits(model: Any, rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """``(B, V)`` logits at each row's last token (right-padded batch, one forward pass over the
    distinct rows)."""
    unique, index = unique_rows(rows)
    if len(unique) < len(rows):
        logits = _last_token_logits(model, unique, pad_id)
        return logits[torch.tensor(index, device=logits.device)]
    return _last_token_logits(model, rows, pad_id)


def _last_token_logits(model: Any, rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    device = next(model.parameters()).device
    ids, mask = right_padded(rows, pad_id, device)
    last = torch.tensor([len(r) - 1 for r in rows], device=device)
    head = model.get_output_embeddings()
    if head is None:  # no separate head to apply: the full logits
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, width, V)
        return logits[torch.arange(len(rows), device=device), last].float()
    # the head on the last position only: (B, V) rather than (B, width, V)
    hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    return head(hidden[torch.arange(len(rows), device=device), last]).float()


def action_logprobs(
    model: Any, rows: Sequence[Sequence[int]], actions: torch.Tensor, pad_id: int, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability ``(B,)`` of each row's action token after its prompt, and the entropy
    ``(B,)`` of that next-token distribution; differentiable when grad is on."""
    logprob, entropy, _ = action_terms(model, rows, actions, pad_id, temperature)
    return logprob, entropy


def action_terms(
    model: Any,
    rows: Sequence[Sequence[int]],
    actions: torch.Tensor,
    pad_id: int,
    temperature: float = 1.0,
    legal_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`action_logprobs` and the raw ``(B, V)`` logits they come from (one forward pass).
    With ``legal_ids`` (``(B, W)``, -1 padded) the log-probs and entropy are the masked policy's:
    the softmax over the legal moves alone."""
    raw = last_token_logits(model, rows, pad_id)
    if legal_ids is not None:
        from chessrl.lm.masked import masked_log_softmax

        legal_ids = legal_ids.to(raw.device)
        logp = masked_log_softmax(raw, legal_ids, temperature)
        valid = legal_ids >= 0
        finite = logp.masked_fill(~valid, 0.0)  # -inf padding times 0 would make the gradient NaN
        entropy = -(finite.exp() * finite * valid).sum(-1)
        index = (legal_ids == actions.view(-1, 1).to(raw.device)).float().argmax(-1, keepdim=True)
        return logp.gather(-1, index).squeeze(-1), entropy, raw
    logp = torch.log_softmax(raw / temperature, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, actions.view(-1, 1).to(logp.device)).squeeze(-1), entropy, raw


def state_values(critic: Any, rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """``(B,)`` values of the states (a one-label sequence-classification model reads each row
    up to its last token, once per distinct row); differentiable when grad is on."""
    unique, index = unique_rows(rows)
    ids, mask = right_padded(unique, pad_id, next(critic.parameters()).device)
    values = critic(input_ids=ids, attention_mask=mask).logits[:, 0].float()
    return values if len(unique) == len(rows) else values[torch.tensor(index, device=values.device)]


@torch.no_grad()
def reference_logprobs(
    policy_ref: Any,
    rows: Sequence[Sequence[int]],
    tokens: torch.Tensor,
    pad_id: int,
    settings: PPOSettings,
    masked: torch.Tensor | None,
    chunk: int = 64,
) -> torch.Tensor:
    """The frozen reference's log-probability of each action (masked: over its legal moves),
    ``chunk`` prompts a forward pass, on the CPU."""
    return torch.cat(
        [
            action_terms(
                policy_ref,
                rows[i : i + chunk],
                tokens[i : i + chunk],
                pad_id,
                settings.temperature,
                masked[i : i + chunk] if masked is not None else None,
            )[0]
            for i in range(0, len(rows), chunk)
        ]
    ).cpu()
