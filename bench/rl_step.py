"""Bench: PPO samples/s of the ``ppo`` phase (a RolloutCollector, a RewardServer and the Ray Train
learner on an embedded local Ray of 2 CPUs) ÷ the same algorithm in one process with no Ray
(sampling, scoring and training in turn), same models, settings and batch sizes. Median of
``--repeats`` runs of each side, the ratio on the last line.

    .venv/bin/python bench/rl_step.py                      # untrained tiny policy and reward model
    .venv/bin/python bench/rl_step.py --policy runs/demo/sft/model --reward-model runs/demo/reward/model
    .venv/bin/python bench/rl_step.py --iterations 4 --repeats 3 --games runs/demo/prepare/games
    .venv/bin/python bench/rl_step.py --algo grpo           # GRPO against TRL's GRPOTrainer: bench/grpo_step.py
    .venv/bin/python bench/rl_step.py --readers             # the Ray Data replay stream / the arrow reader

A sample is one policy action the learner trained on. Both sides take the ``ppo`` section of the
tiny preset (``--config`` for another) with :data:`REWARD_MODEL_PPO` (the reward-model path this
bench measures) and ``critic_warmup`` 0 (every iteration moves the
policy) and ``--iterations`` + 1 iterations; the first is a warm-up and is not timed.

- Baseline: this process, ``torch.set_num_threads(--baseline-threads)`` (2: the CPUs the phase
  gets), no Ray. Each iteration plays ``episodes_per_iteration`` episodes in rounds of
  ``concurrent_games`` (as a collector plays them: one batched forward pass a move for all games
  of a round) with :func:`chessrl.rl.ppo.play_episodes`, the reward model scoring each step's legal
  moves in process (``score_ids`` on ``query_ids`` rows, normalised as the RewardServer does),
  then :func:`chessrl.rl.ppo.make_batch` and :func:`chessrl.rl.ppo.ppo_update` on all of them, the
  steps of :func:`chessrl.rl.ppo.ppo_iteration` (which it is, when an iteration is one round). The
  same opponent pool (``self``: the policy being trained, ``random``), the same optimisers and
  learning rates, the reference a frozen copy of the policy, the critic a copy of the reward model.
  Samples/s: actions of iterations 2..N+1 / their wall time.
- Phase: ``python -m pipelines.ppo --num-cpus 2 --no-tracking`` in a fresh process and temporary
  storage per run, the same models and sizes. Samples/s from its ``logs/metrics.jsonl``: the
  ``actions`` of iterations 2..N+1 over the ``elapsed_s`` between the end of iteration 1 and the
  end of the last (Ray, actor and learner start-up, the final export and checkpoint excluded;
  the phase's own checkpoints every ``checkpoint_interval`` iterations included).

Episode starts: the start position, or with ``--games`` a games table (the ``prepare`` output)
sampled as the phase samples it (:func:`pipelines.ppo.start_pool`) on both sides. An untrained
tiny policy plays mostly illegal moves, so its episodes are one or two actions long and the
iterations are short: the numbers measure the machinery's overhead more than the models'; a
trained policy and reward model measure the steady state. Runs alternate baseline, phase,
baseline, ... so machine noise hits both; before each run the bench waits (``--wait-quiet``
seconds at most) for other processes to leave the CPUs, and each run prints how many cores they
kept busy meanwhile (``other load``; above 0.3 the run is flagged: a 2-thread baseline sharing
its 2 CPUs with a busy process runs many times slower). Before the ratio, a
table of where each side's seconds went: the baseline's sampling, scoring and learning; the
phase learner's wait for rollouts, learning, weight publishing, checkpoints and logging (its
``metrics.jsonl``), and its collectors' sampling, scoring, opponents, weight pulls, shard
writes and idle time (their status files). The last line is
``rl_step ratio (...): X.XX (target >= 1.2)``, X = median(phase samples/s) / median(baseline
samples/s); a JSON record goes to ``--json``. With the defaults a run takes about 5 minutes on 2
quiet CPUs; with the demo's trained models about 5 minutes a repeat at ``--iterations 4``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rl_common
from ppo_baseline import baseline_run, episode_pool
from record import write_record

TARGET = 1.2


def tiny_models(folder: Path) -> tuple[str, str]:
    """An untrained tiny policy and reward model (one tokenizer), saved under ``folder``."""
    from chessrl.lm.models import build_model
    from chessrl.rl.reward import build_reward_model

    model, tokenizer = build_model("tiny")
    policy = folder / "policy"
    model.save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    reward, tokenizer = build_reward_model("tiny", tokenizer)
    rm = folder / "reward"
    reward.save_pretrained(rm)
    tokenizer.save_pretrained(rm)
    return str(policy), str(rm)


#: The ppo this bench measures: against a reward model, one move a state, the policy's own games
#: (the tiny preset's ppo section until it moved to the board sft graded by Stockfish).
REWARD_MODEL_PPO: dict[str, Any] = {
    "reward": "model",
    "text_format": "moves",
    "samples_per_state": 1,
    "table_positions": 0.0,
    "episodes_per_iteration": 64,
    "concurrent_games": 32,
    "max_actions": 16,
    "max_staleness": 1,
    "minibatch": 64,
    "legal_coef": 1.0,
    "learning_rate": 1e-5,
}


def _phase_flags(policy_path: str, reward_path: str, cfg: Any, iterations: int) -> list[str]:
    """The ``pipelines.ppo`` flags that give the phase the baseline's models and settings."""
    return [
        "--policy",
        policy_path,
        "--reward-model",
        reward_path,
        "--iterations",
        str(iterations + 1),
        "--critic-warmup",
        "0",
        "--episodes-per-iteration",
        str(cfg.episodes_per_iteration),
        "--concurrent-games",
        str(cfg.concurrent_games),
        "--max-actions",
        str(cfg.max_actions),
        "--max-start-ply",
        str(cfg.max_start_ply),
        "--opponents",
        *cfg.opponents,
        "--reward",
        cfg.reward,
        "--text-format",
        cfg.text_format,
        "--samples-per-state",
        str(cfg.samples_per_state),
        "--table-positions",
        str(cfg.table_positions),
        "--max-staleness",
        str(cfg.max_staleness),
        "--minibatch",
        str(cfg.minibatch),
        "--legal-coef",
        str(cfg.legal_coef),
        "--learning-rate",
        str(cfg.learning_rate),
        "--heldout-positions",
        "0",  # no held-out evaluation after the timed iterations
    ]


def _collector_seconds(folder: Path) -> dict[str, float]:
    """Each kind of collector seconds (``sample``, ``score``, ...) summed over the phase's
    collectors' status files, cumulative over the whole run, warm-up included."""
    spent: dict[str, float] = {}
    for path in sorted((folder / "collectors").glob("collector-*.json")):
        for key, value in json.loads(path.read_text()).get("seconds", {}).items():
            spent[key] = spent.get(key, 0.0) + value
    return spent


def phase_run(
    policy_path: str,
    reward_path: str,
    cfg: Any,
    games: str | None,
    iterations: int,
    config: str,
    work: Path,
    index: int,
    seed: int,
    timeout_s: float,
    reader: str | None = None,
) -> dict[str, Any]:
    """``python -m pipelines.ppo`` on a fresh embedded Ray of 2 CPUs; samples/s from its metrics.
    ``reader``: the learner's ``--rollout-reader`` (default: the preset's)."""
    argv = (
        rl_common.phase_argv(
            "ppo",
            config,
            work,
            index,
            seed,
            timeout_s,
            _phase_flags(policy_path, reward_path, cfg, iterations),
        )
        + (["--games", games] if games else [])
        + (["--rollout-reader", reader] if reader else [])
    )
    rows, folder, code, wall = rl_common.run_phase("ppo", argv, work, index, timeout_s, "rl_step")
    timed = rows[1:]
    spent = _collector_seconds(folder)
    actions = int(sum(r["actions"] for r in timed))
    episodes = int(sum(r["episodes"] for r in timed))
    seconds = rows[-1]["elapsed_s"] - rows[0]["elapsed_s"]
    return {
        "samples_per_s": actions / seconds,
        "actions": actions,
        "episodes": episodes,
        "seconds": seconds,
        "iterations": len(timed),
        "learn_s": sum(r["learner_step_s"] for r in timed),
        "wait_s": sum(r["wait_s"] for r in timed),
        "stale_dropped": int(rows[-1].get("stale_dropped", 0)),
        "publish_s": sum(r.get("publish_s", 0.0) for r in timed),
        "checkpoint_s": sum(r.get("report_s", 0.0) for r in timed),
        "log_s": sum(r.get("log_s", 0.0) for r in timed),
        "collectors_s": spent,
        "episode_length": actions / max(1, episodes),
        "phase_seconds": wall,
        "startup_s": rows[0]["elapsed_s"],
        "exit": code,
    }


def print_time_table(baseline: list[dict[str, Any]], phase: list[dict[str, Any]]) -> None:
    """Where each side's timed seconds go (medians over runs): the learner's split in the phase,
    each collector's (summed over collectors, whole run) beside it."""

    def med(rows: list[dict[str, Any]], key: str, sub: str | None = None) -> float:
        values = [(r[key].get(sub, 0.0) if sub else r[key]) for r in rows if key in r]
        return statistics.median(values) if values else float("nan")

    print("where the time goes (s, median of runs):")
    print(
        f"  baseline: {med(baseline, 'seconds'):.1f} = sample {med(baseline, 'sample_s'):.1f} + "
        f"score {med(baseline, 'score_s'):.1f} + learn {med(baseline, 'learn_s'):.1f}"
    )
    other = med(phase, "seconds") - sum(
        med(phase, k) for k in ("learn_s", "wait_s", "publish_s", "checkpoint_s", "log_s")
    )
    print(
        f"  phase learner: {med(phase, 'seconds'):.1f} = wait for rollouts {med(phase, 'wait_s'):.1f} + learn "
        f"{med(phase, 'learn_s'):.1f} + publish weights {med(phase, 'publish_s'):.1f} + checkpoints "
        f"{med(phase, 'checkpoint_s'):.1f} + logging {med(phase, 'log_s'):.1f} + other {other:.1f}"
    )
    kinds = ("sample", "score", "opponents", "weights", "write", "idle")
    print(
        "  phase collectors (whole run, warm-up included): "
        + ", ".join(f"{k} {med(phase, 'collectors_s', k):.1f}" for k in kinds)
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The PPO bench's flags, checked."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--algo",
        choices=("ppo", "grpo"),
        default="ppo",
        help="ppo: this bench; grpo: the grpo phase against TRL's GRPOTrainer (bench/grpo_step.py; its flags: "
        "--algo grpo --help) [default: ppo]",
    )
    parser.add_argument("--policy", default=None, help="a saved policy [default: an untrained tiny one]")
    parser.add_argument(
        "--reward-model", default=None, help="its reward model [default: an untrained tiny one]"
    )
    parser.add_argument(
        "--games", default=None, help="a games table to start episodes from [default: the start position]"
    )
    parser.add_argument(
        "--readers",
        action="store_true",
        help="compare the phase's two rollout readers instead (ppo.rollout_reader stream / arrow, the Ray "
        "Data replay stream against the lead's pyarrow reads): the ratio of their samples/s",
    )
    rl_common.add_run_flags(parser, "ppo", "iterations", 6, "the baseline")
    rl_common.add_phase_flags(parser, "rl_step.json")
    args = parser.parse_args(argv)
    rl_common.check_run_flags(parser, args)
    if (args.policy is None) != (args.reward_model is None):
        parser.error("--policy and --reward-model go together")
    return args


def print_setup(
    args: argparse.Namespace, cfg: Any, models: str, vocab: Any, pool: list[tuple[str, ...]]
) -> None:
    """The models, the episode starts, both sides' settings and the machine."""
    print(
        f"models: {models} (vocab {vocab}); starts: "
        + (f"{len(pool)} cut games of {args.games}" if args.games else "the start position")
    )
    print(
        f"ppo ({args.config}): {args.iterations} timed iterations (+1 warm-up) of {cfg.episodes_per_iteration} "
        f"episodes, {cfg.concurrent_games} games at once, T={cfg.max_actions}, opponents {', '.join(cfg.opponents)}, "
        f"{cfg.ppo_epochs} epochs of minibatch {cfg.minibatch}; phase: {cfg.collectors} collector(s), "
        f"{cfg.reward_servers} reward server(s), learner on {rl_common.NUM_CPUS} CPUs; baseline: {args.baseline_threads} "
        f"torch threads"
    )
    rl_common.print_machine()


def run_pairs(
    args: argparse.Namespace, cfg: Any, seed: int, policy: str, reward: str, work: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``--repeats`` runs of each side, alternating baseline and phase, run ``i`` with seed
    ``seed + i``; each run's line printed as it ends."""
    baseline: list[dict[str, Any]] = []
    phase: list[dict[str, Any]] = []
    for i in range(args.repeats):
        b = rl_common.measured(
            args.wait_quiet,
            baseline_run,
            policy,
            reward,
            cfg,
            args.games,
            args.iterations,
            seed + i,
            args.baseline_threads,
        )
        baseline.append(b)
        print(
            f"  run {i + 1} baseline {b['samples_per_s']:8.1f} samples/s ({b['actions']} actions, "
            f"{b['episode_length']:.2f} a game, {b['seconds']:.1f} s: play {b['play_s']:.1f}, learn "
            f"{b['learn_s']:.1f}; other load {rl_common.fmt_load(b['other_load_cores'])})",
            flush=True,
        )
        p = rl_common.measured(
            args.wait_quiet,
            phase_run,
            policy,
            reward,
            cfg,
            args.games,
            args.iterations,
            args.config,
            work,
            i,
            seed + i,
            args.phase_timeout,
        )
        phase.append(p)
        print(
            f"  run {i + 1} phase    {p['samples_per_s']:8.1f} samples/s ({p['actions']} actions, "
            f"{p['episode_length']:.2f} a game, {p['seconds']:.1f} s: learner wait {p['wait_s']:.1f}, "
            f"learn {p['learn_s']:.1f}; start-up {p['startup_s']:.0f} s, {p['phase_seconds']:.0f} s end to "
            f"end; other load {rl_common.fmt_load(p['other_load_cores'])})"
            + (
                ""
                if p["iterations"] == args.iterations
                else f" - {p['iterations']} iterations, stopped ({p['exit']})"
            ),
            flush=True,
        )
    return baseline, phase


def run_readers(
    args: argparse.Namespace, cfg: Any, seed: int, policy: str, reward: str, work: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``--readers``: ``--repeats`` phase runs with each rollout reader, alternating arrow and
    stream, run ``i`` with seed ``seed + i``."""
    runs: dict[str, list[dict[str, Any]]] = {"arrow": [], "stream": []}
    for i in range(args.repeats):
        for reader, got in runs.items():
            p = rl_common.measured(
                args.wait_quiet,
                phase_run,
                policy,
                reward,
                cfg,
                args.games,
                args.iterations,
                args.config,
                work,
                2 * i + (reader == "stream"),
                seed + i,
                args.phase_timeout,
                reader,
            )
            got.append(p)
            print(
                f"  run {i + 1} {reader:6s} {p['samples_per_s']:8.1f} samples/s ({p['actions']} actions, "
                f"{p['seconds']:.1f} s: learner wait {p['wait_s']:.1f}, learn {p['learn_s']:.1f}; start-up "
                f"{p['startup_s']:.0f} s; other load {rl_common.fmt_load(p['other_load_cores'])})",
                flush=True,
            )
    return runs["arrow"], runs["stream"]


def report_readers(
    args: argparse.Namespace, arrow: list[dict[str, Any]], stream: list[dict[str, Any]], began: float
) -> None:
    """``--readers``: the medians, the JSON record and the ratio line (stream / arrow)."""
    arrow_med, stream_med, ratio, busy = rl_common.medians(arrow, stream)
    start = statistics.median(r["startup_s"] for r in stream) - statistics.median(
        r["startup_s"] for r in arrow
    )
    print(
        f"median arrow {arrow_med:.1f} samples/s; median stream {stream_med:.1f} samples/s; "
        f"the stream's start-up {start:+.0f} s; bench {time.perf_counter() - began:.0f} s"
    )
    write_record(
        args.json.replace(".json", "_readers.json"),
        {
            "bench": "rl_step_readers",
            "ratio_definition": "median PPO samples/s of the ppo phase with "
            "rollout_reader stream (Ray Data replay stream) / with rollout_reader arrow (the lead's pyarrow reads)",
            "ratio": ratio,
            "arrow": arrow,
            "stream": stream,
            "busy": busy,
            "repeats": args.repeats,
        },
    )
    print(
        f"rl_step readers ratio (stream samples/s / arrow samples/s, median of {args.repeats}): {ratio:.2f} "
        f"(the faster is the default; the stream is kept at >= 0.90)"
    )


def report(
    args: argparse.Namespace,
    cfg: Any,
    models: str,
    baseline: list[dict[str, Any]],
    phase: list[dict[str, Any]],
    began: float,
) -> None:
    """Where the time went, the medians, the JSON record and the ratio line."""
    print_time_table(baseline, phase)
    wall = time.perf_counter() - began
    base_med, phase_med, ratio, busy = rl_common.medians(baseline, phase)
    print(
        f"median baseline {base_med:.1f} samples/s; median phase {phase_med:.1f} samples/s; bench {wall:.0f} s"
    )
    write_record(
        args.json,
        {
            "bench": "rl_step",
            "ratio_definition": "median PPO samples/s (actions trained on / s) of the ppo phase (collector + "
            "RewardServer + Ray Train learner, embedded Ray of 2 CPUs) / median samples/s of the same iterations "
            "in one process without Ray",
            **rl_common.run_record(args, models, ratio, TARGET, busy, baseline, phase, wall),
            "episodes_per_iteration": cfg.episodes_per_iteration,
            "concurrent_games": cfg.concurrent_games,
            "max_actions": cfg.max_actions,
            "opponents": list(cfg.opponents),
        },
    )
    print(
        f"rl_step ratio (phase samples/s / one-process samples/s, median of {args.repeats}): "
        f"{ratio:.2f} (target >= {TARGET:g})"
    )


def main(argv: list[str] | None = None) -> int:
    algo = argparse.ArgumentParser(add_help=False)
    algo.add_argument("--algo", choices=("ppo", "grpo"), default="ppo")
    known, rest = algo.parse_known_args(argv)
    if known.algo == "grpo":  # GRPO against TRL's GRPOTrainer: bench/grpo_step.py, its own flags
        from grpo_step import main as grpo_main

        return grpo_main(rest, prog=f"{Path(sys.argv[0]).name} --algo grpo")
    args = parse_args(argv)
    rl_common.own_ray()

    from cluster.config import load_config, resolve_preset
    from pipelines.config import ChessRLConfig
    from pipelines.ppo import check_models

    config = load_config(ChessRLConfig, path=resolve_preset(args.config))
    cfg = config.ppo.model_copy(update={"critic_warmup": 0, **REWARD_MODEL_PPO})
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-rl-step-") as tmp:
        work = Path(tmp)
        if args.policy is None:
            policy, reward = tiny_models(work)
            models = "untrained tiny policy and reward model"
        else:
            policy, reward = args.policy, args.reward_model
            models = f"policy {policy}, reward model {reward}"
        facts = check_models(policy, reward, cfg.max_start_ply + 2 * cfg.max_actions + 2)
        print_setup(
            args,
            cfg,
            models,
            facts["vocab"],
            episode_pool(args.games, cfg, config.run.seed, config.sft.heldout_fraction),
        )
        if args.readers:
            arrow, stream = run_readers(args, cfg, config.run.seed, policy, reward, work)
        else:
            baseline, phase = run_pairs(args, cfg, config.run.seed, policy, reward, work)
    if args.readers:
        report_readers(args, arrow, stream, began)
    else:
        report(args, cfg, models, baseline, phase, began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
