"""``chess-rl``: one command, one sub-command per phase.

    chess-rl --help
    chess-rl prepare --config tiny --min-elo 2000

``chess-rl <phase> ARGS`` runs exactly the code of ``python -m pipelines.<phase> ARGS``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

#: The one registry of phases and commands: name -> (module, the one line that ``chess-rl --help``,
#: each phase's own ``--help`` and the README's table of phases show).
PHASES: dict[str, tuple[str, str]] = {
    "prepare": (
        "pipelines.prepare",
        "PGN files (local or s3://) and/or Stockfish-generated games -> a filtered games table (Parquet)",
    ),
    "annotate": (
        "pipelines.annotate",
        "Stockfish's value of every legal move of many positions (training games, the policy's own, random games)",
    ),
    "sft": (
        "pipelines.sft",
        "a GPT-2-style policy fine-tuned on games (Ray Train + TRL), or distilled from annotate's values",
    ),
    "evaluate": (
        "pipelines.evaluate",
        "arenas of players as Ray tasks: Elo on a ladder anchored to Stockfish, SPRT A/B matches, suites, PGN, a report",
    ),
    "preferences": (
        "pipelines.preferences",
        "the sft policy proposes moves, Stockfish (or a trained judge) ranks them -> preference pairs (Parquet)",
    ),
    "reward": (
        "pipelines.reward",
        "a reward model trained on the pairs (Ray Train + TRL), served to the RL phases by the RewardServer actor",
    ),
    "ppo": (
        "pipelines.ppo",
        "masked PPO of an sft policy, graded by Stockfish (the tiny preset's) or the reward model (--config judge): rollout collectors, RewardServer or engines, Ray Train learner",
    ),
    "grpo": (
        "pipelines.grpo",
        "masked GRPO of an sft policy or of a reward model read as a policy, each move's reward verified by Stockfish (EnginePool) and python-chess",
    ),
    "dpo": ("pipelines.dpo", "TRL's DPOTrainer on the preference pairs, in the policy's own text format"),
    "selfplay": (
        "pipelines.selfplay",
        "AlphaZero-style training by self-play with batched MCTS and arena gating",
    ),
    "rlaif": (
        "pipelines.rlaif",
        "every RLAIF phase as one resumable graph on one Ray session: what make demo runs",
    ),
    "tune": (
        "pipelines.tune",
        "Ray Tune sweeps (grid or random, ASHA) of a phase's section, trials nested in MLflow",
    ),
    # commands rather than phases (no Ray)
    "config": (
        "pipelines.config.reference",
        "every configuration key with its flag, type, default and meaning (--markdown: docs/config.md)",
    ),
    "uci": ("pipelines.uci", "a trained model as a UCI engine for chess GUIs and lichess-bot"),
}


def one_line(name: str) -> str:
    """``<name>: <its one line>``, a phase's summary (its ``--help`` starts with it).

    >>> one_line("dpo")
    "dpo: TRL's DPOTrainer on the preference pairs, in the policy's own text format"
    """
    return f"{name}: {PHASES[name][1]}"


def usage() -> str:
    width = max(len(n) for n in PHASES)
    lines = [
        "usage: chess-rl <phase> [options]   (chess-rl <phase> --help for a phase's flags)",
        "",
        "A Ray-native system that makes chess-playing models stronger.",
        "",
        "phases:",
        *(f"  {name:<{width}}  {text}" for name, (_, text) in PHASES.items()),
        "",
        "Every phase runs on an embedded local Ray, or joins the cluster in RAY_ADDRESS / --address;",
        "`ray job submit --working-dir . -- python -m pipelines.<phase> ...` runs the same code on a cluster.",
        "`chess-rl uci --model DIR` needs no Ray: it plays a saved model as a UCI engine on stdin/stdout.",
        "`chess-rl config [SECTION]` prints every configuration key (docs/config.md holds them all).",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("-V", "--version"):
        from chessrl import __version__

        print(f"chess-rl {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name in PHASES:
        module = importlib.import_module(PHASES[name][0])
        return int(module.main(rest, prog=f"chess-rl {name}"))
    print(f"error: unknown phase {name!r}; phases: {', '.join(PHASES)} (chess-rl --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
