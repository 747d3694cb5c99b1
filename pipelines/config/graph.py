"""The sections that drive other phases: ``rlaif`` (the RLAIF phases as one resumable graph)
and ``tune`` (a Ray Tune sweep of one phase)."""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from cluster.config import Section

RLAIF_PHASES: tuple[str, ...] = (
    "prepare",
    "sft",
    "sft-rookworld",
    "sft-board",
    "preferences",
    "reward",
    "ppo",
    "grpo",
    "online-dpo",
    "dpo",
    "evaluate",
)


class RlaifConfig(Section):
    """``rlaif``: every phase of the RLAIF pipeline as one resumable graph (prepare -> sft ->
    preferences -> reward -> ppo, sft -> grpo, then an evaluate of ppo and grpo against sft). Each
    phase reads its own section of this config; a phase whose manifest holds the key of its config
    and inputs is skipped."""

    only: list[str] = Field(default_factory=list)
    """Run only these phases (their inputs must be done already)."""
    start: str | None = None
    """Run this phase and everything downstream of it (--from)."""
    force: list[str] = Field(default_factory=list)
    """Run these phases again even when their manifest matches (their outputs are replaced)."""
    compare_games: int = Field(20, ge=2)
    """evaluate: games of each head-to-head pairing (ppo vs sft, grpo vs sft, ppo vs grpo)."""
    online_dpo: bool = False
    """Add an online-dpo node beside grpo: the grpo section with loss_type dpo (the same start,
    rollouts and Stockfish grades; each group's best and worst moves a DPO pair), its outputs in
    <run>/online-dpo, its policy in the comparison against its start and the random mover."""
    dpo: bool = True
    """The offline dpo node (dpo on preferences' pairs, from the sft start) and its policy in the
    comparison. false: left out, and preferences with it when no other node reads its pairs (a
    judge learning from annotate's, as in the judge preset, whose chain it shortens by ~17 min)."""
    compare_adjudicate_cp: int | None = Field(300, ge=1)
    """The comparison's games that reach evaluate.max_plies are decided by Stockfish: ahead by this
    many centipawns wins (null: drawn). Its language models play masked (their best legal move),
    their unmasked first-attempt legal rate reported beside."""

    @field_validator("only", "force")
    @classmethod
    def _known_phases(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in RLAIF_PHASES:
                raise ValueError(f"unknown phase {name!r}; phases: {', '.join(RLAIF_PHASES)}")
        return value

    @field_validator("start")
    @classmethod
    def _known_start(cls, value: str | None) -> str | None:
        if value is not None and value not in RLAIF_PHASES:
            raise ValueError(f"unknown phase {value!r}; phases: {', '.join(RLAIF_PHASES)}")
        return value


#: What ``tune`` sweeps, with the metric (of the learner's per-iteration report) it optimises by
#: default and the search space it uses when none is given.
TUNE_DEFAULTS: dict[str, tuple[str, str, dict[str, list[float]]]] = {
    "ppo": ("reward_mean", "max", {"ppo.kl_coef": [0.01, 0.03, 0.1, 0.3]}),
    "grpo": ("reward_mean", "max", {"grpo.beta": [0.0, 0.02, 0.04, 0.1]}),
    "dpo": ("heldout_choice_accuracy", "max", {"dpo.beta": [0.03, 0.1, 0.3, 1.0]}),
    "selfplay": ("loss", "min", {"selfplay.mcts_cpuct": [1.0, 1.5, 2.5, 4.0]}),
}
#: The distributions a search-space key may draw from (``search: random`` only).
TUNE_DISTRIBUTIONS: tuple[str, ...] = ("uniform", "loguniform", "randint")


def _numbers(value: Any) -> Any:
    """YAML 1.1 reads ``1e-6`` as a string: numbers written so become numbers again."""
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            return value
    return value


class TuneConfig(Section):
    """``tune``: a Ray Tune sweep of one phase (ppo, grpo, dpo or selfplay) over keys of its section;
    each trial is a real run of the phase with its outputs under ``<run>/tune/<name>/``."""

    phase: Literal["ppo", "grpo", "dpo", "selfplay"] = "ppo"
    """The phase each trial runs (its inputs come from this run, as for the phase itself)."""
    name: str = Field("sweep", pattern=r"^[A-Za-z0-9_.-]+$")
    """The sweep's name: its folder is <run>/tune/<name>; the same name again resumes it."""
    space: dict[str, Any] = Field(default_factory=dict)
    """Search space, KEY=VALUES each: ppo.kl_coef=0.01,0.1 (grid points, or choices with --search
    random) or grpo.beta='{loguniform: [0.001, 0.1]}' (uniform, loguniform, randint: random only).
    Default: ppo.kl_coef, grpo.beta, dpo.beta or selfplay.mcts_cpuct at four values."""
    search: Literal["grid", "random"] = "grid"
    """grid: every combination of the lists; random: draw --samples trials."""
    samples: int = Field(1, ge=1)
    """Tune's num_samples: with grid, runs of each grid point; with random, trials drawn."""
    metric: str | None = None
    """What the learner reports that picks the best trial (default: reward_mean for ppo and grpo,
    heldout_choice_accuracy for dpo, loss for selfplay)."""
    mode: Literal["max", "min"] | None = None
    """Whether the metric is better high or low (default: max for reward_mean, min for loss)."""
    scheduler: Literal["asha", "fifo"] = "asha"
    """asha: stop trials that trail the others at the same iteration; fifo: run every trial to its end."""
    grace_period: int = Field(2, ge=1)
    """Learner iterations a trial runs before ASHA may stop it."""
    reduction_factor: float = Field(2.0, gt=1)
    """ASHA keeps the best 1/reduction_factor of the trials at each rung."""
    max_concurrent: int = Field(1, ge=1)
    """Trials at once (each one holds its phase's full resources: raise it on a cluster)."""

    @field_validator("space", mode="before")
    @classmethod
    def _space_items(cls, value: Any) -> Any:
        """``--space k=v k2=v2`` arrives as a list of strings (values are YAML; a bare ``a,b``
        is a list)."""
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return value
        out: dict[str, Any] = {}
        for item in value:
            key, sep, text = str(item).partition("=")
            if not sep or not key.strip():
                raise ValueError(f"{item!r}: expected SECTION.KEY=VALUES, e.g. ppo.kl_coef=0.01,0.1")
            try:
                parsed = yaml.safe_load(text)
            except yaml.YAMLError:
                parsed = text
            if isinstance(parsed, str) and "," in parsed:
                parsed = [yaml.safe_load(v) for v in parsed.split(",") if v.strip()]
            out[key.strip()] = parsed  # numbers and one-value lists: _space_shapes
        return out

    @field_validator("space")
    @classmethod
    def _space_shapes(cls, value: dict[str, Any]) -> dict[str, Any]:
        value = {
            k: v if isinstance(v, (list, dict)) or v is None else [v] for k, v in _numbers(value).items()
        }
        for key, spec in value.items():
            if isinstance(spec, list):
                if not spec:
                    raise ValueError(f"{key}: an empty list of values")
            elif isinstance(spec, dict):
                if len(spec) != 1 or next(iter(spec)) not in TUNE_DISTRIBUTIONS:
                    raise ValueError(
                        f"{key}: a distribution is one of {{{', '.join(f'{d}: [low, high]' for d in TUNE_DISTRIBUTIONS)}}}"
                    )
                bounds = next(iter(spec.values()))
                if not (
                    isinstance(bounds, list)
                    and len(bounds) == 2
                    and all(isinstance(b, (int, float)) for b in bounds)
                    and bounds[0] < bounds[1]
                ):
                    raise ValueError(f"{key}: {spec}: expected [low, high] with low < high")
            else:
                raise ValueError(f"{key}: {spec!r}: expected a list of values or {{uniform: [low, high]}}")
        return value

    @model_validator(mode="after")
    def _grid_has_no_distributions(self) -> TuneConfig:
        if self.search == "grid":
            ranged = [k for k, v in self.space.items() if isinstance(v, dict)]
            if ranged:
                raise ValueError(f"space: {', '.join(ranged)} draw from a distribution: use search: random")
        return self
