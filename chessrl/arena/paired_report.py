"""What ``evaluate --mode paired`` writes and prints: the report and the summary lines of paired
move quality, several runs against their start on the same held-out positions (the numbers come
from :mod:`chessrl.arena.move_quality`). Ray-free.

>>> q = {"start": 0.0812, "final": 0.0650, "gain": 0.0162, "low": 0.0070, "high": 0.0254,
...      "same_move": 700, "positions": 1000, "final_unmasked_legal": 0.97}
>>> results = {"start": "sft", "positions": 1000, "games": 250, "nodes": 20000,
...            "runs": {"grpo": q}, "over_runs": {}}
>>> for line in paired_summary_lines(results, "s3://bucket/report.md"):
...     print(line)
evaluate summary (paired)
  start         sft (1000 held-out positions of 250 games, Stockfish 20000 nodes)
  grpo  gain +0.0162 [+0.0070, +0.0254] (by game), same move 70%
  report        s3://bucket/report.md
"""

from __future__ import annotations

from typing import Any

__all__ = ["paired_markdown", "paired_summary_lines"]


def _gain(q: dict[str, Any]) -> str:
    return f"{q['gain']:+.4f} [{q['low']:+.4f}, {q['high']:+.4f}]"


def _same_move(q: dict[str, Any]) -> str:
    return "-" if q.get("same_move") is None else f"{q['same_move'] / max(1, q['positions']):.0%}"


def paired_markdown(results: dict[str, Any]) -> str:
    """The paired report: each run's gain over the start on the same positions, and the mean
    over runs with its interval (runs' spread and positions' both, clustered by game)."""
    start, runs, over = results["start"], results["runs"], results["over_runs"]
    lines = [
        f"# Paired move quality against `{start}`",
        "",
        f"{results['positions']} positions of {results['games']} held-out games ({results['positions_from']}; "
        f"drawn with seed {results['seed']}, without replacement, at most {results['per_game']} a game, no start "
        f"position); each player's legal-masked argmax move, Stockfish at {results['nodes']} nodes from an empty "
        "hash per position: the loss is the best move's expected score minus the move's. Gain = the start's "
        "loss minus the run's (positive: better); intervals are clustered by game (a game's positions count "
        "as one draw).",
        "",
        "| player | loss (start -> player) | paired gain [95%] | same move | unmasked greedy legal |",
        "|---|---|---|---|---|",
    ]
    for name, q in runs.items():
        lines.append(
            f"| `{name}` | {q['start']:.4f} -> {q['final']:.4f} | {_gain(q)} | "
            f"{_same_move(q)} | {results['start_unmasked_legal']:.1%} -> {q['final_unmasked_legal']:.1%} |"
        )
    lines.append("")
    if over:
        lines += [
            f"**Over the {int(over['runs'])} runs: {_gain(over)}** (95%; the runs' gains' sd "
            f"{over['run_sd']:.4f}, {over['df']:.1f} degrees of freedom). Each run's own interval counts "
            "the positions' noise only; this one adds the spread between runs, which is what "
            "another seed of the same configuration would bring.",
            "",
        ]
    else:
        lines += [
            "One run: the spread between runs is not measured (give the same learner's runs of "
            "other seeds as more players).",
            "",
        ]
    return "\n".join(lines)


def paired_summary_lines(results: dict[str, Any], report_uri: str) -> list[str]:
    """The driver's summary of ``--mode paired``."""
    over = results["over_runs"]
    lines = [
        "evaluate summary (paired)",
        f"  start         {results['start']} ({results['positions']} held-out positions of "
        f"{results['games']} games, Stockfish {results['nodes']} nodes)",
    ]
    width = max(len(n) for n in results["runs"])
    for name, q in results["runs"].items():
        lines.append(f"  {name:<{width}}  gain {_gain(q)} (by game), same move {_same_move(q)}")
    if over:
        lines.append(
            f"  over {int(over['runs'])} runs   gain {_gain(over)} (the runs' sd {over['run_sd']:.4f})"
        )
    lines.append(f"  report        {report_uri}")
    return lines
