"""The paired move quality of a learner's start and final policies on held-out positions, which
ppo, dpo, grpo and online DPO report: a driver-side step after training, through the same
function and the same positions as ``chess-rl evaluate --mode paired`` with the run's seed.

    quality = heldout_quality(context, {"start": policy_path, "final": final_path}, "moves",
                              games=cfg.games, positions=cfg.heldout_positions, nodes=cfg.quality_nodes)
"""

from __future__ import annotations

from typing import Any

from cluster.storage import Storage
from pipelines.common.phase import PhaseContext


def as_chooser(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` as the paired measure asks them: a scorer wrapped as the
    :class:`~chessrl.rl.scorer_policy.ScorerPolicy` that picks its best-scored move, a language
    model as it is."""
    from chessrl.rl.scorer_policy import ScorerPolicy, is_scorer

    return (ScorerPolicy(model, tokenizer), tokenizer) if is_scorer(model) else (model, tokenizer)


def heldout_quality(
    context: PhaseContext,
    models: dict[str, str],
    text_format: str = "moves",
    *,
    games: str | None,
    positions: int,
    nodes: int,
) -> dict[str, Any]:
    """The start and final policies' paired move quality on up to ``positions`` positions of the
    held-out games (of ``games``, else the run's prepare table: sft.heldout_fraction of them,
    drawn with the run's seed + 1 by :func:`chessrl.arena.move_quality.heldout_positions`),
    asked in the policies' ``text_format`` and scored by Stockfish at ``nodes`` from an empty
    hash per position (:func:`chessrl.arena.move_quality.paired_move_quality`); logged to
    MLflow; empty without a games table or with either count 0."""
    from chessrl.arena.move_quality import heldout_positions, paired_move_quality, stockfish_expected
    from chessrl.arena.saved_models import load_playing_model
    from chessrl.lm.lm_data import split_games
    from pipelines.common.artifacts import fit_games, read_games

    source = Storage.from_uri(games or context.phase_storage("prepare").uri_of("games"))
    if positions == 0 or nodes == 0 or (not games and not source.exists()):
        return {}
    _, held, _ = split_games(read_games(source), context.config.sft.heldout_fraction)
    if not held:
        return {}
    for path in models.values():  # each game cut to the shortest context, as evaluate does
        held = fit_games(held, text_format, path)
    asked = heldout_positions(held, positions, context.config.run.seed + 1)
    loaded = {name: as_chooser(*load_playing_model(path)) for name, path in models.items()}
    with stockfish_expected(nodes) as expected:
        quality = paired_move_quality(loaded, asked, text_format, expected)
    context.tracking.log_metrics({f"quality_{k}": v for k, v in quality.items() if v is not None})
    return quality
