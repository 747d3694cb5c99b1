"""What ``reward`` reads, checked before Ray starts (:func:`check_reward`): the backbone (a
GPT-2-style checkpoint, or a fresh preset made by :func:`fresh_backbone`) and the preference
pairs (``reward.preferences``, else this run's ``preferences`` or ``annotate`` output, as
``reward.source`` says). Apart from :mod:`pipelines.reward` as ``ppo_inputs`` is from ``ppo``.

    found = check_reward(config, Inputs(run_storage))
    found.base                      # 'runs/demo/sft/model', or '' for a fresh backbone
    found.preferences[0].uri        # 'runs/demo/annotate/pairs' with reward.source: annotate
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster.errors import ConfigError, StorageError
from cluster.storage import Storage
from pipelines.common.artifacts import preference_table
from pipelines.common.phase import Inputs, PhaseContext, location, readable_model
from pipelines.config import ChessRLConfig

#: The folder under ``<run>/reward`` that holds a fresh backbone (``reward.model``).
BACKBONE = "backbone"


def check_backbone(path: str, key: str = "reward.base_model (--base-model)") -> dict[str, Any]:
    """The ``config.json`` of a GPT-2-style checkpoint; anything else is one clear error."""
    from chessrl.lm.checkpoints import ModelLoadError, checkpoint_config

    try:
        config = checkpoint_config(path)
    except (ModelLoadError, StorageError) as exc:
        raise StorageError(f"{key}: {exc}") from None
    kind = config.get("model_type")
    if kind != "gpt2":
        raise ConfigError(
            f"{key}: {path} is a {kind or 'model_type-less'} checkpoint; the reward model is "
            "GPT2ForSequenceClassification, so it needs a GPT-2-style one (model_type gpt2), "
            "e.g. this run's sft model"
        )
    readable_model(path, key)
    return config


def base_model_location(config: ChessRLConfig, inputs: Inputs) -> str:
    """The backbone's folder or URI: ``reward.base_model``, else this run's sft model; ``''``
    for a fresh one (``reward.model``: :func:`fresh_backbone` writes it when the phase runs)."""
    cfg = config.reward
    if cfg.model:
        return ""
    if cfg.base_model:
        return cfg.base_model
    model = inputs.folder("sft").child("model")
    if not inputs.will_write("sft") and not model.exists("config.json"):
        raise StorageError(
            f"no sft model at {model.uri}: run `chess-rl sft` first, pass --base-model DIR|s3://..., "
            "or --model tiny for a fresh backbone"
        )
    return location(model)


def fresh_backbone(context: PhaseContext) -> tuple[str, dict[str, Any]]:
    """``reward.model``'s fresh GPT-2 (random weights from the run's seed, the chess tokenizer)
    saved under ``<run>/reward/backbone``, its location and its config: the same seed writes the
    same weights, so a resumed run reads the backbone it started from."""
    from chessrl.lm.models import build_model
    from pipelines.learner.loop import export_pretrained

    preset = context.config.reward.model
    assert preset is not None
    out = context.phase_storage("reward").child(BACKBONE)
    if not out.exists("config.json"):
        model, tokenizer = build_model(preset, seed=context.config.run.seed)
        export_pretrained(model, tokenizer, out, "chessrl-backbone-")
        context.log(f"a fresh {preset} backbone (seed {context.config.run.seed}) at {out.uri}")
    path = location(out)
    return path, check_backbone(path, "reward.model (--model)")


@dataclass(frozen=True)
class RewardInputs:
    """What ``reward`` reads, checked: the base model (its location and its ``config.json``; None
    while an earlier phase of the graph run still has to write it, or for a fresh backbone) and
    the preference table's files (None while an earlier phase writes them)."""

    base: str
    base_config: dict[str, Any] | None
    preferences: tuple[Storage, list[str], list[str], set[str]] | None


def check_reward(config: ChessRLConfig, inputs: Inputs) -> RewardInputs:
    """Every input of ``reward``, before Ray starts: the base model (a GPT-2-style checkpoint)
    and the preference pairs (Parquet with the needed columns, a train/ split if held-out pairs
    are there), each unless an earlier phase of the same graph run writes it."""
    cfg = config.reward
    base = base_model_location(config, inputs)
    produced = cfg.model or (not cfg.base_model and inputs.will_write("sft"))
    base_config = None if produced else check_backbone(base)
    pairs = None
    if cfg.preferences or not inputs.will_write(cfg.source):
        pairs = preference_files(config, inputs)
    return RewardInputs(base, base_config, pairs)


def preference_folder(config: ChessRLConfig, inputs: Inputs) -> Storage:
    """``reward.preferences``, else this run's ``preferences`` output or ``annotate``'s pairs."""
    cfg = config.reward
    if cfg.preferences:
        return Storage.from_uri(cfg.preferences)
    folder = inputs.folder(cfg.source)
    return folder.child("pairs") if cfg.source == "annotate" else folder


def preference_files(config: ChessRLConfig, inputs: Inputs) -> tuple[Storage, list[str], list[str], set[str]]:
    """The preference table's training and held-out Parquet files (relative names) and the
    columns every file has; a missing, empty or wrong-schema table is one clear error."""
    folder = preference_folder(config, inputs)
    if config.reward.preferences or config.reward.source != "annotate":
        return preference_table(folder)
    if not folder.exists() or not any(f.endswith(".parquet") for f in folder.list_files()):
        raise StorageError(
            f"reward.source is annotate, but {folder.uri} holds no pairs: run `chess-rl annotate` "
            "(with annotate.pairs above 0) first, or pass --preferences DIR|s3://..."
        )
    return preference_table(folder)
