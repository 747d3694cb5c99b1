"""PPO's types, Ray-free and torch-free: the settings (:class:`PPOSettings`), one recorded
policy move (:class:`Action`, a row of a rollout shard) and the shards' names
(:func:`rollout_shard_name`, :func:`list_rollout_shards`: light enough for a Ray Data read task). The episodes (:mod:`chessrl.rl.ppo`) and
the update (:mod:`chessrl.rl.ppo_learner`) both read them; neither imports the other's module for
them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: A finished rollout shard's name: ``shard-<collector>-<n>.parquet``.
SHARD_NAME = re.compile(r"^shard-(\d+)-(\d+)\.parquet$")


def rollout_shard_name(collector: int, n: int) -> str:
    """The ``n``-th rollout shard of ``collector``.

    >>> rollout_shard_name(1, 12)
    'shard-01-000012.parquet'
    """
    return f"shard-{collector:02d}-{n:06d}.parquet"


def list_rollout_shards(storage: Any) -> list[str]:
    """Finished rollout shards under ``storage`` (a :class:`cluster.storage.Storage`; temporary
    files of writes in progress excluded), in name order."""
    if not storage.exists():
        return []
    return sorted(rel for rel in storage.list_files() if SHARD_NAME.match(rel))


@dataclass(frozen=True)
class PPOSettings:
    """The algorithm's knobs (the ``ppo`` config section passes them through)."""

    kl_coef: float = 0.05
    """beta: weight of the per-action k1 KL to the reference policy in the reward."""
    clip: float = 0.2
    """epsilon of the clipped surrogate."""
    value_clip: float = 0.2
    """Clip range of the value loss around the old values."""
    gamma: float = 1.0
    """Discount over the policy's moves."""
    lam: float = 0.95
    """GAE lambda."""
    ppo_epochs: int = 2
    """Passes over each iteration's experience."""
    minibatch: int = 64
    """Actions per optimiser step."""
    temperature: float = 1.0
    """Sampling temperature (the log-probabilities are taken at the same temperature)."""
    illegal_penalty: float = -3.0
    """The reward of an illegal or unparseable move (in normalised reward units); it ends the episode."""
    result_weight: float = 0.0
    """Weight of the game result (+1 win, 0 draw or unfinished, -1 loss) added to the last action."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus in the policy loss (0: none)."""
    max_grad_norm: float = 1.0
    """Gradient clipping of both models."""
    legal_coef: float = 0.0
    """Weight of an auxiliary legal-move loss (-log of the probability mass on the legal moves of
    each action's position, :func:`chessrl.lm.legality.legal_move_loss`) added to the policy loss,
    like InstructGPT's PPO-ptx mixes in the pretraining loss. Negative advantages push a sampled
    token's probability onto the whole vocabulary, mostly illegal tokens that are never sampled
    back: on the demo, PPO alone lowered the sampled legal rate from 76% to 70%."""
    masked: bool = False
    """Sample the policy's moves from its distribution restricted to the legal moves (their
    tokens' logits renormalised), with the same masked log-probs for the behaviour policy, the
    learner and the reference: no illegal move is played, and ``legal_coef`` trains legality.
    """
    center_scores: bool = True
    """Subtract the mean score of the batch's legal moves from each legal move's score. Without
    it, a policy whose moves the reward model rates below its training average (a weak sft
    policy: -0.4 on the demo) earns a negative reward per move, so an early illegal move, which
    ends the episode, beats playing on: with gamma = 1 the illegal moves got the higher
    advantages and PPO taught the policy to play them (measured on the demo run)."""
    text_format: str = "moves"
    """What the policy reads (:func:`chessrl.lm.formats.get_format`): ``moves`` (the game so far)
    or ``board`` (the position, one character a square: the board sft's format)."""
    samples_per_state: int = 1
    """Moves drawn for each policy turn (``k``, masked only): the first is played, all are graded,
    and each is scored against the mean grade of the other ``k - 1`` (the leave-one-out baseline of
    RLOO, veRL's ``rloo`` estimator) instead of the batch's mean; the ``k - 1`` not played are
    learned from as one-move episodes (so ``gamma`` must be 0). A per-position baseline: most of a
    grade's variance is which position it is, not which move."""
    anchor_coef: float = 0.0
    """Weight of an NLL anchor on the best-graded of each position's ``samples_per_state`` drawn
    moves (its masked log-probability, averaged over the minibatch's best moves; a position whose
    moves all grade alike has none), added to the policy loss: RPO's term, as online DPO has it
    (``grpo --loss-type dpo --rpo-alpha``, there on the chosen move of each pair past its margin).
    Leave-one-out advantages push the better moves up only as much as the worse ones down; the
    anchor pulls the argmax towards the best move drawn. 0: none."""


@dataclass
class Action:
    """One policy move of an episode, as a collector records it (a row of a rollout shard)."""

    episode: str
    t: int
    prompt_ids: list[int]
    action_id: int
    move: str
    legal: bool
    logprob: float
    version: int
    score: float = 0.0
    """The move's score: the reward model's, normalised, or Stockfish's grade in [0, 1]
    (``ppo.reward: stockfish``); 0 for an illegal one."""
    result: float = 0.0
    """The game's result from the policy's side, on the episode's last action (0 elsewhere)."""
    last: bool = False
    opponent: int = 0
    """Index of the episode's opponent in the configured pool."""
    legal_ids: list[int] = field(default_factory=list)
    """The legal move tokens of the position (as the masked policy saw them; empty: not recorded,
    the learner lists them from the prompt's moves)."""
    alt_ids: list[int] = field(default_factory=list)
    """The other moves drawn in this position (``samples_per_state - 1``), not played."""
    alt_logprobs: list[float] = field(default_factory=list)
    """Their log-probabilities under the sampling policy."""
    alt_scores: list[float] = field(default_factory=list)
    """Their scores (grades), as :attr:`score` is the played move's."""
