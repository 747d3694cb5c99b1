"""GRPO with engine-verified rewards on RookWorld's two tasks, Ray-free: the rewards, the group
advantages and the loss. ``pipelines/grpo.py`` runs them on a Ray Train learner with the
EnginePool scoring moves.

Tasks (:class:`chessrl.formats.RookWorldFormat`):

- policy ``P: <FEN> M:`` → `` <move>``. Reward: the floor (``illegal_reward``) for an illegal or
  unparseable move; otherwise how much of the best move's expected score the move keeps, from
  Stockfish at the configured limit: ``clamp(1 - (E_best - E_move) / max_loss, 0, 1)`` with ``E``
  the expected score (win + draw / 2) of the side to move. The best move gets 1, a move that gives
  away ``max_loss`` (0.5: an even position thrown into a lost one) or more gets 0.
- environment ``A: <FEN>+<move>+<history>+`` → ``<next FEN>+<reward>+<terminated>+<truncated>``.
  Reward: each field checked exactly against python-chess, partial credit by
  :data:`ENV_WEIGHTS` (the FEN 0.7, each flag 0.1); exact match = all four right, nothing extra.

>>> policy_reward("legal", best=0.55, move=0.55), policy_reward("legal", best=0.55, move=0.05)
(1.0, 0.0)
>>> policy_reward("illegal", best=0.55, move=None)
-1.0
>>> env_reward("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1+0+0+0",
...            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1+0+0+0").reward
1.0

Advantages: :func:`chessrl.policy_gradient.compute_grpo_outcome_advantage` over each group of
``group_size`` completions of one prompt. Loss types (:func:`grpo_loss`), the formulas of veRL's
``core_algos`` and the papers:

- ``grpo``: ``A = (r - mean) / std`` per group; clipped surrogate (ε); per-sequence token mean,
  then the mean over sequences; ``+ beta * k3`` KL to the reference, same aggregation.
- ``dr_grpo`` (Dr. GRPO): ``A = r - mean`` (no std); per-sequence token *sum* over a constant
  length, then the mean over sequences.
- ``dapo`` (DAPO): ``A`` as ``grpo``; clip-higher (``clip_high``, 0.28); token mean over the
  batch; groups whose rewards are all equal are dropped from the loss (dynamic sampling).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import chess
import torch

from chessrl.formats import RookWorldFormat, parse_move
from chessrl.policy_gradient import (
    agg_loss,
    compute_grpo_outcome_advantage,
    compute_policy_loss,
    kl_penalty,
    masked_mean,
)

LossType = Literal["grpo", "dr_grpo", "dapo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "dr_grpo", "dapo")
TASKS: tuple[str, ...] = ("policy", "environment")
#: Partial credit of the environment task's fields.
ENV_WEIGHTS: dict[str, float] = {"fen": 0.7, "reward": 0.1, "terminated": 0.1, "truncated": 0.1}
ENV_FIELDS: tuple[str, ...] = tuple(ENV_WEIGHTS)


@dataclass(frozen=True)
class GRPOSettings:
    """The algorithm's knobs (the ``grpo`` config section passes them through)."""

    group_size: int = 4
    """Completions sampled per prompt."""
    loss_type: LossType = "grpo"
    beta: float = 0.04
    """Weight of the k3 KL to the frozen reference in the loss (0: no reference pass)."""
    clip: float = 0.2
    """epsilon of the clipped surrogate (the lower bound for ``dapo``)."""
    clip_high: float = 0.28
    """Upper clip of ``dapo`` (clip-higher); the other loss types clip symmetrically at ``clip``."""
    temperature: float = 1.0
    illegal_reward: float = -1.0
    """The floor: a policy-task completion that is not a legal move."""
    max_loss: float = 0.5
    """Expected-score loss against the best move that scores 0 on the policy task."""
    kl_estimator: str = "k3"
    env_weights: dict[str, float] = field(default_factory=lambda: dict(ENV_WEIGHTS))

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                f"group_size must be >= 2 (a group of one has no advantage), got {self.group_size}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; loss types: {', '.join(LOSS_TYPES)}")
        if self.beta < 0 or self.clip <= 0 or self.clip_high <= 0 or self.max_loss <= 0:
            raise ValueError("beta must be >= 0 and clip, clip_high, max_loss > 0")


def policy_reward(
    status: str, *, best: float | None, move: float | None, settings: GRPOSettings | None = None
) -> float:
    """The policy task's reward from the move's parse ``status`` and the expected scores (side to
    move, in [0, 1]) of the best move and of the move played."""
    s = settings or GRPOSettings()
    if status != "legal" or best is None or move is None:
        return s.illegal_reward
    return float(min(1.0, max(0.0, 1.0 - (best - move) / s.max_loss)))


@dataclass(frozen=True)
class EnvScore:
    """An environment-task completion checked field by field."""

    fields: dict[str, bool]
    reward: float
    exact: bool


def env_reward(completion: str, target: str, weights: dict[str, float] | None = None) -> EnvScore:
    """``completion`` (``<next FEN>+<reward>+<terminated>+<truncated>``) against ``target``, the
    answer python-chess gives (:meth:`RookWorldFormat.env_target`). A missing field is wrong;
    anything after the fourth field makes the answer inexact but costs no credit.

    >>> e = env_reward("8/8/8/8/8/8/8/K6k b - - 1 1+1+0", "8/8/8/8/8/8/8/K6k b - - 1 1+0+0+0")
    >>> e.fields, round(e.reward, 2), e.exact
    ({'fen': True, 'reward': False, 'terminated': True, 'truncated': False}, 0.8, False)
    """
    w = weights or ENV_WEIGHTS
    got = completion.strip().split("+")
    want = target.split("+")
    fields = {name: i < len(got) and got[i].strip() == want[i] for i, name in enumerate(ENV_FIELDS)}
    reward = sum(w[name] for name, ok in fields.items() if ok)
    return EnvScore(fields, round(float(reward), 6), all(fields.values()) and len(got) == len(ENV_FIELDS))


@dataclass(frozen=True)
class Prompt:
    """One GRPO prompt: its task, text, the position and, for the environment task, the move
    applied and the expected answer."""

    task: str
    text: str
    fen: str
    move: str | None = None
    target: str | None = None
    phase: str = ""


def policy_prompt(fen: str, phase: str = "") -> Prompt:
    """``P: <FEN> M:``."""
    return Prompt("policy", RookWorldFormat().policy_prompt(chess.Board(fen)), fen, phase=phase)


def env_prompt(fen: str, move: str, history: Sequence[str] = (), phase: str = "") -> Prompt:
    """``A: <FEN>+<move>+<history>+`` and its answer (``move`` must be legal in ``fen``)."""
    fmt, board = RookWorldFormat(), chess.Board(fen)
    return Prompt(
        "environment", fmt.env_prompt(board, move, history), fen, move, fmt.env_target(board, move), phase
    )


def parse_policy_completion(fen: str, completion: str) -> tuple[str, str | None]:
    """``(status, move)`` of a policy-task completion: ``legal`` / ``illegal`` / ``unparseable``."""
    parsed = parse_move(chess.Board(fen), completion)
    return parsed.status, parsed.move


def group_advantages(
    rewards: torch.Tensor, groups: Sequence[Hashable], loss_type: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample advantages and a keep mask (``dapo`` drops groups whose rewards are all equal).

    >>> a, keep = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), [0, 0, 1, 1], "dr_grpo")
    >>> a.tolist(), keep.tolist()
    ([0.5, -0.5, 0.0, 0.0], [True, True, True, True])
    >>> group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), [0, 0, 1, 1], "dapo")[1].tolist()
    [True, True, False, False]
    """
    advantages = compute_grpo_outcome_advantage(rewards, groups, norm_by_std=loss_type != "dr_grpo")
    keep = torch.ones_like(rewards, dtype=torch.bool)
    if loss_type == "dapo":
        for g in set(groups):
            idx = [i for i, k in enumerate(groups) if k == g]
            values = rewards[idx]
            if bool((values == values[0]).all()):
                keep[idx] = False
    return advantages, keep


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
