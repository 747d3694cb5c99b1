"""``grpo``'s report: ``summary.json`` and the summary lines the driver prints (the learner's
curves first -> last, the held-out start -> final figures, the paired move quality and the next
command), from :func:`pipelines.grpo.run_grpo`'s results.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from pipelines.common.artifacts import grpo_folder
from pipelines.common.phase import PhaseContext, PhaseResult
from pipelines.learner import final_metrics
from pipelines.learner.loop import curve, read_metrics


def summarise(
    context: PhaseContext,
    folder: str,
    policy_path: str,
    result: Any,
    seconds: float,
    drawn: dict[str, Any],
    scores: dict[str, dict[str, float]],
    quality: dict[str, Any],
    *,
    scorer: bool = False,
) -> PhaseResult:
    """``summary.json`` and the summary lines (``scorer``: the policy is a reward model, played
    as ``judge:``)."""
    cfg = context.config.grpo
    phase = context.phase_storage(folder)
    final = final_metrics(result)
    rows = read_metrics(phase.child("logs"))
    first, last = (rows[0], rows[-1]) if rows else ({}, {})
    summary = {
        "phase": grpo_folder(cfg.loss_type),
        "iterations": int(final.get("iteration", 0)),
        "samples": int(final.get("samples_total", 0)),
        "seconds": round(seconds, 1),
        "drawn": drawn,
        "first": first,
        "last": last,
        "heldout": scores,
        "quality": quality,
        "samples_per_s": sum(r["samples"] for r in rows)
        / max(1e-9, sum(r["generate_s"] + r["score_s"] + r["learn_s"] for r in rows)),
        "model": phase.uri_of("model"),
        "policy_kind": "scorer" if scorer else "language model",
    }
    phase.write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True, default=str))
    lines = summary_lines(
        summary, scores, cfg.stockfish_nodes, policy_path, seed=context.config.run.seed, scorer=scorer
    )
    if quality:
        from chessrl.arena.move_quality import quality_line

        lines.insert(
            -2,
            f"  paired        {quality_line(quality)} ({'best-scored move' if scorer else 'masked argmax'}, "
            f"Stockfish {cfg.stockfish_nodes} nodes)",
        )
    return PhaseResult(summary=summary, lines=lines, ok=True)


def summary_lines(
    summary: dict[str, Any],
    scores: dict[str, dict[str, float]],
    stockfish_nodes: int,
    policy_path: str,
    *,
    seed: int = 7,
    scorer: bool = False,
) -> list[str]:
    """The ``grpo summary`` the driver prints: learner, mix, reward and legal-rate curves (first
    -> last iteration), the held-out start -> final scores and the next command."""
    drawn, first, last, seconds = summary["drawn"], summary["first"], summary["last"], summary["seconds"]
    env = drawn["tasks"].get("environment", 0) > 0

    trend = partial(curve, first, last)

    def player(path: str) -> str:  # a scorer plays its best-scored move; a language model, masked
        return f"judge:{path}" if scorer else f"lm:{path},masked"

    return [
        "grpo summary",
        f"  learner       {summary['iterations']} iterations, {summary['samples']} samples in {seconds:.0f} s "
        f"({summary['samples_per_s']:.1f} samples/s)",
        f"  mix           {drawn['policy_share']:.1%} policy tasks; positions "
        + ", ".join(f"{k} {v}" for k, v in drawn["phases"].items()),
        f"  reward        policy {trend('reward_policy', '+.3f')}"
        + (f", environment {trend('reward_environment', '.3f')}" if env else ""),
        f"  sampled       legal {trend('legal_rate', '.1%')}"
        + (f", env exact {trend('env_exact', '.1%')}" if env else "")
        + f", zero-variance groups {trend('zero_variance_groups', '.0%')}",
        *(
            [
                f"  held-out      greedy legal-move rate {scores['start']['legal_rate']:.1%} -> {scores['final']['legal_rate']:.1%}"
                + (
                    f", environment exact {scores['start']['env_exact']:.1%} -> {scores['final']['env_exact']:.1%}"
                    if env
                    else ""
                )
                + f" ({int(scores['final']['policy_positions'])} + {int(scores['final']['env_positions'])} positions, start -> final)",
                f"  greedy reward policy task {scores['start'].get('policy_reward', float('nan')):+.3f} -> "
                f"{scores['final'].get('policy_reward', float('nan')):+.3f} (the reward of the argmax move, Stockfish at "
                f"{stockfish_nodes} nodes)",
            ]
            if scores
            else []
        ),
        f"  model         {summary['model']}",
        f"  next          chess-rl evaluate --mode sprt --players {player(summary['model'])} {player(policy_path)} "
        f"--adjudicate-cp 300 --seed {seed}",
    ]
