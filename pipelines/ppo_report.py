"""What ``ppo`` shows when it ends: the curves of its iterations as one PNG
(:func:`plot_curves`) and the ``ppo summary`` lines the driver prints (:func:`summary_lines`).
Neither starts Ray; the phase calls both once its learner is done::

    plot_curves(read_metrics(...), "curves.png")
    lines = summary_lines(summary, config.ppo, seconds, "curves.png", seed=config.run.seed)
"""

from __future__ import annotations

from typing import Any

from pipelines.config import PPOConfig
from pipelines.learner.loop import curve


def plot_curves(rows: list[dict[str, Any]], path: str) -> None:
    """Reward, KL to the reference, legal-move rate and value loss by iteration, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    its = [r["iteration"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    for ax, key, title in (
        (axes[0][0], "reward_mean", "reward (normalised RM score - beta KL)"),
        (axes[0][1], "kl_to_ref", "KL to the sft reference (k1, per action)"),
        (axes[1][0], "legal_rate", "legal-move rate of the samples"),
        (axes[1][1], "value_loss", "critic value loss"),
    ):
        ax.plot(its, [r.get(key, float("nan")) for r in rows], marker=".")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary_lines(
    summary: dict[str, Any], cfg: PPOConfig, seconds: float, curves: str, *, seed: int = 7
) -> list[str]:
    """The ``ppo summary`` the driver prints: the learner, the reward, KL and legal-rate curves
    (first -> last iteration), the held-out start -> final figures and the next command."""
    from chessrl.arena.move_quality import quality_line
    from pipelines.ppo_select import selection_line

    first, last, heldout, quality = summary["first"], summary["last"], summary["heldout"], summary["quality"]
    return [
        "ppo summary",
        f"  learner       {summary['iterations']} iterations, {summary['episodes']} episodes, "
        f"{summary['actions']} actions in {seconds:.0f} s ({summary['stale_dropped']} stale episodes dropped)",
        f"  score         {curve(first, last, 'score_mean', '+.3f')}   (the moves' mean score before centring: "
        f"{'Stockfish grade' if cfg.reward == 'stockfish' else 'reward model'})",
        f"  reward        {curve(first, last, 'reward_mean', '+.3f')}   "
        f"(legal moves only: {curve(first, last, 'legal_reward_mean', '+.3f')})",
        f"  KL to sft     {curve(first, last, 'kl_to_ref', '.4f')}",
        f"  legal rate    {curve(first, last, 'legal_rate', '.1%')}",
        *(
            [
                f"  held-out      greedy legal-move rate {heldout['start']['legal_rate']:.1%} (start) -> "
                f"{heldout['final']['legal_rate']:.1%} (final) on {heldout['final']['positions']} positions"
            ]
            if heldout
            else []
        ),
        *(
            [f"  paired        {quality_line(quality)} (masked argmax, Stockfish {cfg.quality_nodes} nodes)"]
            if quality
            else []
        ),
        *([f"  selection     {selection_line(summary['selection'])}"] if summary.get("selection") else []),
        f"  collectors    {summary['shards_written']} shards written, {summary['shards_read']} read, "
        f"{summary['collector_restarts']} restart(s)",
        f"  model         {summary['model']}",
        f"  curves        {curves}",
        f"  next          chess-rl evaluate --mode sprt --players lm:{summary['model']},masked "
        f"lm:{summary.get('start', 'sft')},masked --adjudicate-cp 300 --seed {seed}",
    ]
