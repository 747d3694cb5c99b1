"""``chess-rl``: one command, one sub-command per phase.

    chess-rl --help
    chess-rl prepare --config tiny --min-elo 2000

``chess-rl <phase> ARGS`` runs exactly the code of ``python -m pipelines.<phase> ARGS``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

#: Phases that run today: name -> (module, one line).
PHASES: dict[str, tuple[str, str]] = {
    "prepare": (
        "pipelines.prepare",
        "PGN files (.pgn, .pgn.zst; local or s3://) and/or --generate N Stockfish games -> games Parquet",
    ),
    "annotate": (
        "pipelines.annotate",
        "positions (training games, the policy's own games, random games) -> Stockfish's value of every legal move",
    ),
    "sft": ("pipelines.sft", "games Parquet -> a GPT-2-style policy (Ray Train + TRL SFTTrainer), resumable"),
    "evaluate": (
        "pipelines.evaluate",
        "arenas of players as Ray tasks -> scores, Elo vs Stockfish UCI_Elo, suites, PGN, report",
    ),
    "preferences": (
        "pipelines.preferences",
        "games + the sft policy -> Stockfish-judged chosen/rejected pairs (EnginePool, batched samplers)",
    ),
    "reward": (
        "pipelines.reward",
        "preference pairs -> a reward model (Ray Train + TRL RewardTrainer), held-out accuracy, resumable",
    ),
    "ppo": (
        "pipelines.ppo",
        "PPO against the reward model: rollout collectors, RewardServer, Ray Train learner, KL to sft, resumable",
    ),
    "grpo": (
        "pipelines.grpo",
        "GRPO of an sft policy (masked in the presets), each move graded against Stockfish's best: EnginePool, Ray Train learner",
    ),
    "dpo": (
        "pipelines.dpo",
        "DPO of the sft policy on the preference pairs (Ray Train + TRL DPOTrainer), paired move quality, resumable",
    ),
    "selfplay": (
        "pipelines.selfplay",
        "AlphaZero-style training: batched-MCTS collectors, parameter server, Ray Train learner, gating",
    ),
    "rlaif": (
        "pipelines.rlaif",
        "the whole pipeline as one resumable graph: prepare, sft, preferences, reward, ppo, grpo, dpo, evaluate",
    ),
    "tune": (
        "pipelines.tune",
        "Ray Tune sweeps (grid/random, ASHA) of ppo.kl_coef, grpo.beta, dpo.beta, selfplay.mcts_cpuct; best config as YAML",
    ),
    # commands rather than phases (no Ray)
    "config": (
        "pipelines.config.reference",
        "every configuration key with its flag, type, default and meaning (--markdown: docs/config.md)",
    ),
    "uci": (
        "pipelines.uci",
        "a trained policy as a UCI engine (stdin/stdout) for chess GUIs and lichess-bot",
    ),
}

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
