"""The paired move quality of a learner's start and final policies on held-out positions, which
ppo and dpo report (grpo measures its own prompts): a driver-side step after training.

    quality = heldout_quality(context, cfg, {"start": policy_path, "final": final_path})
"""

from __future__ import annotations

from typing import Any

from cluster.storage import Storage
from pipelines.phase import PhaseContext


def heldout_quality(
    context: PhaseContext, cfg: Any, models: dict[str, str], text_format: str = "moves"
) -> dict[str, Any]:
    """The start and final policies' paired move quality on ``cfg.heldout_positions`` positions
    of the held-out games (:func:`chessrl.arena.move_quality.paired_move_quality`, Stockfish at
    ``cfg.quality_nodes``), asked in the policies' ``text_format``; logged to MLflow; empty
    without a games table (``cfg.games``, else the run's) or with either setting 0."""
    from chessrl.arena.move_quality import heldout_positions, paired_move_quality, stockfish_expected
    from chessrl.arena.saved_models import load_saved_model
    from chessrl.lm.lm_data import split_games
    from pipelines.artifacts import fit_games, read_games

    source = Storage.from_uri(cfg.games or context.phase_storage("prepare").uri_of("games"))
    if cfg.heldout_positions == 0 or cfg.quality_nodes == 0 or (not cfg.games and not source.exists()):
        return {}
    _, held, _ = split_games(read_games(source), context.config.sft.heldout_fraction)
    if not held:
        return {}
    held = fit_games(held, text_format, next(iter(models.values())))
    positions = heldout_positions(held, cfg.heldout_positions, context.config.run.seed + 1)
    loaded = {name: load_saved_model(path, "policy") for name, path in models.items()}
    with stockfish_expected(cfg.quality_nodes) as expected:
        quality = paired_move_quality(loaded, positions, text_format, expected)
    context.tracking.log_metrics({f"quality_{k}": v for k, v in quality.items()})
    return quality
