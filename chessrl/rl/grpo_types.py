"""GRPO's types, Ray-free and torch-free: the settings (:class:`GRPOSettings`), a prompt
(:class:`Prompt`) and a sampled completion with its reward (:class:`Sample`). The sampling
(:mod:`chessrl.rl.grpo`) and the loss (:mod:`chessrl.rl.grpo_loss`) both read them; neither
imports the other's module for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LossType = Literal["grpo", "dr_grpo", "dapo", "dpo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "dr_grpo", "dapo", "dpo")
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
    """Weight of the k3 KL to the frozen reference in the loss (0: no reference pass; ``dpo``
    uses ``dpo_beta`` instead)."""
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
    masked: bool = False
    """Draw policy-task moves from the policy restricted to the position's legal moves (the legal
    move tokens' logits, renormalised), and score them the same way in the learner and the
    reference: every sample is a legal move, so the reward grades quality alone."""
    legal_weight: float = 0.0
    """masked: weight of ``-log P(legal)`` under the full vocabulary, the legality term that keeps
    the unmasked model legal while the masked objective trains quality."""
    dead_zone: float = 0.0
    """Expected-score losses up to this count as the best move's (engine noise), in [0, max_loss)."""
    grade_scale: str = "expected"
    """The value scale a move's loss is measured on (:mod:`chessrl.engine.move_value`): ``margin``
    or ``expected`` (the engine's expected score alone)."""
    std_floor: float = 0.0
    """grpo/dapo: the group std is at least this, so noise-level differences stay small advantages."""
    drop_flat: bool = False
    """Leave groups whose rewards are all equal out of the update (they teach nothing)."""
    pair_margin: float = 0.05
    """``dpo``: a group gives its best and worst samples as a pair when their rewards differ by
    at least this (expected score; below it the ranking is engine noise)."""
    dpo_beta: float = 0.5
    """``dpo``: DPO's beta, the frozen reference's pull on the pairs' log-ratios (> 0)."""
    rpo_alpha: float = 0.2
    """``dpo``: weight of the NLL anchor on each pair's chosen sample (RPO; 0: plain DPO)."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                f"group_size must be >= 2 (a group of one has no advantage), got {self.group_size}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; loss types: {', '.join(LOSS_TYPES)}")
        if self.beta < 0 or self.clip <= 0 or self.clip_high <= 0 or self.max_loss <= 0:
            raise ValueError("beta must be >= 0 and clip, clip_high, max_loss > 0")
        if self.grade_scale not in ("expected", "margin"):
            raise ValueError(f"grade_scale must be expected or margin, got {self.grade_scale!r}")
        if not 0 <= self.dead_zone < self.max_loss:
            raise ValueError(f"dead_zone must be in [0, max_loss={self.max_loss:g}), got {self.dead_zone:g}")
        if self.std_floor < 0 or self.legal_weight < 0:
            raise ValueError("std_floor and legal_weight must be >= 0")
        if self.dpo_beta <= 0:
            raise ValueError(
                f"dpo_beta must be > 0 (DPO's beta, the reference's pull), got {self.dpo_beta:g}"
            )
        if self.pair_margin < 0 or self.rpo_alpha < 0:
            raise ValueError("pair_margin and rpo_alpha must be >= 0")


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
    history: str = ""
    """The UCI moves from the start position to ``fen``, space-separated, where known (the
    ``margin`` grade reads a repetition from them); empty: the position alone."""


@dataclass
class Sample:
    """One sampled completion of a prompt of a group, and what it earned."""

    prompt: Prompt
    group: int
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    reward: float = 0.0
    status: str = ""
    """Policy task: ``legal`` / ``illegal`` / ``unparseable``; environment task: ``exact`` / ``partial``."""
    fields: dict[str, bool] = field(default_factory=dict)
    legal_ids: list[int] | None = None
    """A masked sample: the legal move tokens its move was drawn from (None: unmasked)."""
    move_rows: list[list[int]] | None = None
    """A scorer sample (:mod:`chessrl.rl.grpo_scorer`): the token rows of its position's legal
    moves, its move the ``completion_ids[0]``-th of them (None: a language model's sample)."""
