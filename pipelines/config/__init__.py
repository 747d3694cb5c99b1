"""The typed config of every phase: one section per phase beside ``run``, ``ray`` and ``tracking``.

A preset (``configs/*.yaml``) holds any subset of these sections; what it leaves out keeps
the defaults of its section. The defaults are the ``tiny`` preset's, what a bare ``chess-rl
<phase>`` runs (``configs/tiny.yaml`` sets no key but selfplay's seed flags); the other presets
set what differs. Each field's docstring is its ``--flag``'s help text.

Every name is imported from here (``from pipelines.config import SftConfig``); the sections
live by phase:

- ``pipelines.config.data``: ``prepare`` and ``annotate`` (:class:`PrepareConfig`, :class:`AnnotateConfig`);
- ``pipelines.config.lm``: the language-model phases ``sft``, ``preferences``, ``reward`` and
  ``dpo`` (:class:`SftConfig` to :class:`DPOConfig`), and :data:`BatchSize`, a batch size that
  may be ``auto``;
- ``pipelines.config.rl``: the policy's RL phases, ``ppo`` and ``grpo`` (:class:`PPOConfig`,
  :class:`GRPOConfig` and its :class:`PositionMix`);
- ``pipelines.config.resources``: what the learner sections share, their workers, CPUs, GPUs
  (:class:`LearnerResources`: ``ppo``, ``grpo``) and precision (:class:`TrainerResources`:
  ``sft``, ``reward``, ``dpo``), flat keys of each section;
- ``pipelines.config.arena``: ``evaluate`` (:class:`EvaluateConfig`);
- ``pipelines.config.search``: ``selfplay`` (:class:`SelfplayConfig`);
- ``pipelines.config.graph``: the sections that drive other phases, ``rlaif`` (:class:`RlaifConfig`,
  :data:`RLAIF_PHASES`) and ``tune`` (:class:`TuneConfig`, :data:`TUNE_DEFAULTS`);
- this module: :class:`ChessRLConfig`, the root that lists every section.

``run``, ``ray``, ``tracking`` and the loader (YAML, ``extends:``, overrides, ``--flags``) are
:mod:`cluster.config`'s, which knows nothing about chess.

>>> cfg = ChessRLConfig()
>>> (cfg.run.name, cfg.prepare.min_elo, cfg.prepare.shard_games)
('demo', 0, 1000)
"""

from __future__ import annotations

from pydantic import Field

from cluster.config import RaySection, RunSection, Section, TrackingSection
from pipelines.config.arena import EvaluateConfig
from pipelines.config.data import AnnotateConfig, AnnotateSource, PrepareConfig
from pipelines.config.graph import RLAIF_PHASES, TUNE_DEFAULTS, TUNE_DISTRIBUTIONS, RlaifConfig, TuneConfig
from pipelines.config.lm import (
    BatchSize,
    DPOConfig,
    PreferencesConfig,
    RewardConfig,
    SftConfig,
    positive_or_auto,
)
from pipelines.config.resources import LearnerResources, TrainerResources
from pipelines.config.rl import GRPOConfig, PositionMix, PPOConfig
from pipelines.config.search import SelfplayConfig

__all__ = [
    "RLAIF_PHASES",
    "AnnotateConfig",
    "AnnotateSource",
    "TUNE_DEFAULTS",
    "TUNE_DISTRIBUTIONS",
    "BatchSize",
    "ChessRLConfig",
    "DPOConfig",
    "EvaluateConfig",
    "GRPOConfig",
    "LearnerResources",
    "PPOConfig",
    "PositionMix",
    "PreferencesConfig",
    "PrepareConfig",
    "RewardConfig",
    "RlaifConfig",
    "SelfplayConfig",
    "SftConfig",
    "TrainerResources",
    "TuneConfig",
    "positive_or_auto",
]


class ChessRLConfig(Section):
    """The whole config: what a preset file holds."""

    run: RunSection = Field(default_factory=RunSection)
    ray: RaySection = Field(default_factory=RaySection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    annotate: AnnotateConfig = Field(default_factory=AnnotateConfig)
    sft: SftConfig = Field(default_factory=SftConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    preferences: PreferencesConfig = Field(default_factory=PreferencesConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    selfplay: SelfplayConfig = Field(default_factory=SelfplayConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    dpo: DPOConfig = Field(default_factory=DPOConfig)
    rlaif: RlaifConfig = Field(default_factory=RlaifConfig)
    tune: TuneConfig = Field(default_factory=TuneConfig)
