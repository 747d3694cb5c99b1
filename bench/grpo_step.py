"""Bench: GRPO samples/s of the ``grpo`` phase (a Ray Train learner and the EnginePool on an
embedded local Ray of 2 CPUs) ÷ TRL's ``GRPOTrainer`` in one process with the same policy, prompts,
group size, completion length and reward (a plain python-chess ``SimpleEngine``). Median of
``--repeats`` runs of each side, the ratio on the last line. Run through ``bench/rl_step.py``:

    .venv/bin/python bench/rl_step.py --algo grpo                 # untrained tiny policy, Lichess sample
    .venv/bin/python bench/rl_step.py --algo grpo --policy runs/demo/sft-rookworld/model \\
        --games runs/demo/prepare/games
    .venv/bin/python bench/rl_step.py --algo grpo --iterations 4 --repeats 3 --group-size 8

A sample is one sampled completion the learner trained on. Both sides take the ``grpo`` section
of the tiny preset (``--config`` for another; the flags below override it) and run
``--iterations`` + 1 optimizer steps of ``prompts_per_iteration`` prompts × ``group_size``
completions; the first is a warm-up and is not timed. The prompts are the phase's own
(:func:`pipelines.grpo.plan_prompts`: positions cut from the games table's training games in the
configured phase mix, ``policy_share`` policy tasks ``P: <FEN> M:``, the rest environment tasks
``A: <FEN>+<move>+<history>+``), planned with the same seed on both sides, in the same order.

- Baseline: this process, ``torch.set_num_threads(--baseline-threads)`` (2: the CPUs the phase
  gets), no Ray: ``trl.GRPOTrainer`` (TRL's own generation, no vLLM, fp32 on the CPU) on the
  policy loaded with ``AutoModelForCausalLM`` / ``AutoTokenizer``, ``num_generations`` = group
  size, one optimizer step per generation batch of ``prompts_per_iteration × group_size``
  completions (``per_device_train_batch_size`` = the phase's ``batch_size`` or the step's
  completions if fewer, gradient accumulation for the rest), ``max_completion_length`` = the longest
  limit among the tasks the prompts ask, as the phase's (TRL has one limit for every prompt: with
  environment tasks in the mix the policy task's 2 tokens with the chess tokenizer become their
  128; the board and moves formats ask policy tasks alone, one move token each), the same temperature, beta, learning
  rate (constant), clip epsilon, loss type (``grpo``: std-scaled group advantages, per-sequence
  token mean), a frozen reference. The reward function is TRL's plain Python kind: the policy
  task's move parsed and scored by ONE ``chess.engine.SimpleEngine`` (Stockfish at
  ``stockfish_nodes``, the side to move's expected score of the root and of the position after the
  move, as the phase's :func:`chessrl.rl.grpo.score_samples`; a position analysed once per call), the
  environment task's answer checked by :func:`chessrl.rl.grpo.env_reward`. Samples/s: completions of
  steps 2..N+1 over the time from the end of step 1 to the end of the last (a ``TrainerCallback``).
- Phase: ``python -m pipelines.grpo --num-cpus 2 --no-tracking --heldout-positions 0`` in a fresh
  process and temporary storage per run, the same policy, games, seed and settings. Samples/s from
  its ``logs/metrics.jsonl``: the ``samples`` of iterations 2..N+1 over the ``elapsed_s`` between
  the end of iteration 1 and the end of the last (Ray, actor and learner start-up, the final
  export and checkpoint excluded; its own checkpoints every ``checkpoint_interval`` included).
  The bench checks that the phase's ``prompts.json`` holds the prompts the baseline trained on.

Inputs: ``--policy`` (a rookworld policy folder) and ``--games`` (a games table: Parquet with
``game_id`` and ``moves``). Without them an untrained tiny policy (marked rookworld) and a games
table of the Lichess sample in ``tests/data/pgn`` are written to a temporary folder. An untrained
policy rarely ends a completion, so both sides generate the full limit for environment tasks (and
TRL for policy tasks too) and few moves are legal (little Stockfish work): the numbers measure the
machinery more than the rewards; a trained policy measures the steady state. Runs alternate
baseline, phase, baseline, ... so machine noise hits both, after waiting (``--wait-quiet``
seconds at most) for other processes to leave the CPUs; each run prints the cores they kept busy
meanwhile (above 0.3 the run is flagged). The last line is ``rl_step ratio (...): X.XX (target >=
1.0)``, X = median(phase samples/s) / median(TRL samples/s); a JSON record goes to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import rl_common
from grpo_baseline import baseline_run
from record import ROOT, write_record

TARGET = 1.0
#: Config fields a flag of this bench overrides (``--group-size`` -> ``group_size``), passed on
#: to the phase as the same flags.
OVERRIDES: tuple[tuple[str, type], ...] = (
    ("prompts_per_iteration", int),
    ("group_size", int),
    ("policy_share", float),
    ("stockfish_nodes", int),
    ("max_new_tokens_environment", int),
    ("max_new_tokens_policy", int),
    ("beta", float),
    ("clip", float),
    ("temperature", float),
    ("learning_rate", float),
    ("batch_size", int),
    ("loss_type", str),
)


def tiny_policy(folder: Path) -> str:
    """An untrained tiny policy, marked as trained on the rookworld format, saved under ``folder``."""
    from transformers.utils import logging as hf_logging

    from chessrl.lm.models import build_model

    hf_logging.disable_progress_bar()
    model, tokenizer = build_model("tiny")
    path = folder / "policy"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["chessrl_text_format"] = (
        "rookworld"  # the key sft writes (pipelines.common.artifacts, TEXT_FORMAT_KEY)
    )
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return str(path)


def sample_games(folder: Path) -> str:
    """A games table (``game_id``, ``moves``, ``result``) of the Lichess sample of tests/data/pgn."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chessrl.data.pgn import read_pgn_file

    with open(ROOT / "tests" / "data" / "pgn" / "lichess-2021-10-sample.pgn", "rb") as handle:
        records, _ = read_pgn_file(handle, "lichess")
    path = folder / "games"
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "game_id": [r.game_id for r in records],
                "moves": [r.moves for r in records],
                "result": [r.result for r in records],
            }
        ),
        path / "part-0.parquet",
    )
    return str(path)


def plan(config: Any, cfg: Any, games: str, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The prompts the phase plans with ``--seed seed`` (:func:`pipelines.grpo.plan_prompts`)."""
    from pipelines.grpo import plan_prompts

    context = SimpleNamespace(config=SimpleNamespace(run=SimpleNamespace(seed=seed), sft=config.sft))
    prompts, _, drawn = plan_prompts(context, cfg.model_copy(update={"games": games, "heldout_positions": 0}))  # type: ignore[arg-type]
    return prompts, drawn


def task_limits(cfg: Any, policy: str) -> dict[str, int]:
    """New tokens per task, as the phase sets them (:func:`pipelines.grpo.max_new_tokens`)."""
    from chessrl.lm.checkpoints import load_tokenizer
    from chessrl.lm.models import move_tokens
    from pipelines.grpo import max_new_tokens

    return max_new_tokens(cfg, move_tokens(load_tokenizer(policy)))


def phase_run(
    policy_path: str,
    cfg: Any,
    games: str,
    iterations: int,
    config: str,
    work: Path,
    index: int,
    seed: int,
    timeout_s: float,
) -> dict[str, Any]:
    """``python -m pipelines.grpo`` on a fresh embedded Ray of 2 CPUs; samples/s from its metrics."""
    overrides = []
    for name, _ in OVERRIDES:
        value = getattr(cfg, name)
        if value is not None:
            overrides += [f"--{name.replace('_', '-')}", str(value)]
    argv = rl_common.phase_argv(
        "grpo",
        config,
        work,
        index,
        seed,
        timeout_s,
        [
            "--policy",
            policy_path,
            "--games",
            games,
            "--iterations",
            str(iterations + 1),
            "--heldout-positions",
            "0",
            *overrides,
        ],
    )
    rows, phase, code, wall = rl_common.run_phase("grpo", argv, work, index, timeout_s, "rl_step --algo grpo")
    planned = json.loads((phase / "prompts.json").read_text())["prompts"]
    timed = rows[1:]
    samples = int(sum(r["samples"] for r in timed))
    seconds = rows[-1]["elapsed_s"] - rows[0]["elapsed_s"]
    return {
        "samples_per_s": samples / seconds,
        "samples": samples,
        "seconds": seconds,
        "iterations": len(timed),
        "generate_s": sum(r["generate_s"] for r in timed),
        "score_s": sum(r["score_s"] for r in timed),
        "learn_s": sum(r["learn_s"] for r in timed),
        "legal_rate": statistics.fmean(r["legal_rate"] for r in timed),
        "completion_tokens_mean": statistics.fmean(r["completion_tokens_mean"] for r in timed),
        "phase_seconds": wall,
        "first_iteration_s": rows[0]["elapsed_s"],
        "exit": code,
        "prompts": planned,
    }


def parse_args(
    argv: list[str] | None, prog: str | None
) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The GRPO bench's flags, checked, and their parser (for the settings' errors)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--policy", default=None, help="a rookworld policy folder [default: an untrained tiny one]"
    )
    parser.add_argument(
        "--games",
        default=None,
        help="a games table (Parquet: game_id, moves) [default: the Lichess sample of tests/data/pgn]",
    )
    rl_common.add_run_flags(parser, "grpo", "steps", 4, "TRL's side")
    for name, kind in OVERRIDES:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=kind,
            default=None,
            choices=("grpo", "dr_grpo", "dapo") if name == "loss_type" else None,
            help=f"grpo.{name} on both sides [default: the config's]",
        )
    rl_common.add_phase_flags(parser, "rl_step_grpo.json")
    args = parser.parse_args(argv)
    rl_common.check_run_flags(parser, args)
    return args, parser


def grpo_section(parser: argparse.ArgumentParser, args: argparse.Namespace, config: Any) -> Any:
    """The config's grpo section with this bench's overrides, validated as the phase validates it
    (an error through ``parser``); ``batch_size: auto`` becomes 64."""
    from pipelines.config import GRPOConfig

    updates = {name: getattr(args, name) for name, _ in OVERRIDES if getattr(args, name) is not None}
    try:
        cfg = GRPOConfig.model_validate({**config.grpo.model_dump(), **updates})
    except ValueError as exc:
        parser.error(f"grpo settings: {exc}")
    if not isinstance(cfg.batch_size, int):
        cfg = cfg.model_copy(update={"batch_size": 64})  # auto probes memory in Ray workers: not benched
    return cfg


def print_setup(
    args: argparse.Namespace, cfg: Any, models: str, drawn: dict[str, Any], limits: dict[str, int], trl: Any
) -> None:
    """The policy, the games, both sides' settings (``trl``: the module) and the machine."""
    print(
        f"models: {models}; games: {args.games or 'the Lichess sample'} ({drawn['train_games']} training games)"
    )
    print(
        f"grpo ({args.config}): {args.iterations} timed steps (+1 warm-up) of {cfg.prompts_per_iteration} prompts "
        f"x {cfg.group_size} completions ({cfg.policy_share:.0%} policy tasks), loss {cfg.loss_type}, beta "
        f"{cfg.beta:g}, T={cfg.temperature:g}, new tokens policy {limits['policy']} / environment "
        f"{limits['environment']} (TRL: one limit, the longest of the tasks asked: "
        f"{limits['policy'] if cfg.policy_share >= 1 else max(limits.values())}), Stockfish {cfg.stockfish_nodes} nodes; "
        f"phase: learner + {cfg.engines} engine(s) on {rl_common.NUM_CPUS} CPUs; TRL {trl.__version__}: "
        f"{args.baseline_threads} torch threads, one SimpleEngine"
    )
    rl_common.print_machine()


def run_pairs(
    args: argparse.Namespace,
    config: Any,
    cfg: Any,
    run_cfg: Any,
    policy: str,
    games: str,
    work: Path,
    prompts: list[dict[str, Any]],
    limits: dict[str, int],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``--repeats`` runs of each side, alternating TRL and the phase, run ``i`` with the prompts
    of seed ``config.run.seed + i`` on both; each run's line printed as it ends."""
    baseline: list[dict[str, Any]] = []
    phase: list[dict[str, Any]] = []
    for i in range(args.repeats):
        seed = config.run.seed + i  # the phase gets --seed seed: the same prompts on both sides
        planned = prompts if i == 0 else plan(config, run_cfg, games, seed)[0]
        b = rl_common.measured(
            args.wait_quiet,
            baseline_run,
            policy,
            cfg,
            planned,
            limits,
            args.iterations,
            seed,
            args.baseline_threads,
            work / f"trl-{i}",
        )
        baseline.append(b)
        print(
            f"  run {i + 1} TRL      {b['samples_per_s']:8.1f} samples/s ({b['samples']} completions, "
            f"{b['completion_tokens_mean']:.1f} tokens each, {b['seconds']:.1f} s: generate {b['generate_s']:.1f}, "
            f"Stockfish {b['score_s']:.1f}, learn {b['learn_s']:.1f}; legal {b['legal_rate']:.0%}; other load "
            f"{rl_common.fmt_load(b['other_load_cores'])})",
            flush=True,
        )
        p = rl_common.measured(
            args.wait_quiet,
            phase_run,
            policy,
            run_cfg,
            games,
            args.iterations,
            args.config,
            work,
            i,
            seed,
            args.phase_timeout,
        )
        used = planned[: (args.iterations + 1) * cfg.prompts_per_iteration]
        p["same_prompts"] = p.pop("prompts")[: len(used)] == used
        if not p["same_prompts"]:
            print(
                "  warning: the phase planned other prompts than TRL trained on (see pipelines.grpo.plan_prompts)"
            )
        phase.append(p)
        print(
            f"  run {i + 1} phase    {p['samples_per_s']:8.1f} samples/s ({p['samples']} completions, "
            f"{p['completion_tokens_mean']:.1f} tokens each, {p['seconds']:.1f} s: generate {p['generate_s']:.1f}, "
            f"Stockfish {p['score_s']:.1f}, learn {p['learn_s']:.1f}; legal {p['legal_rate']:.0%}; warm-up "
            f"{p['first_iteration_s']:.0f} s, {p['phase_seconds']:.0f} s end to end; other load "
            f"{rl_common.fmt_load(p['other_load_cores'])})"
            + (
                ""
                if p["iterations"] == args.iterations
                else f" - {p['iterations']} iterations, stopped ({p['exit']})"
            ),
            flush=True,
        )
    return baseline, phase


def report(
    args: argparse.Namespace,
    cfg: Any,
    models: str,
    limits: dict[str, int],
    baseline: list[dict[str, Any]],
    phase: list[dict[str, Any]],
    began: float,
) -> None:
    """The medians, the JSON record and the ratio line."""
    import trl

    wall = time.perf_counter() - began
    base_med, phase_med, ratio, busy = rl_common.medians(baseline, phase)
    print(f"median TRL {base_med:.1f} samples/s; median phase {phase_med:.1f} samples/s; bench {wall:.0f} s")
    write_record(
        args.json,
        {
            "bench": "rl_step",
            "algo": "grpo",
            "ratio_definition": "median GRPO samples/s (completions trained on / s) of the grpo phase (Ray Train "
            "learner + EnginePool, embedded Ray of 2 CPUs) / median samples/s of TRL's GRPOTrainer in one process "
            "(same policy, prompts, group size, completion length and reward, one python-chess SimpleEngine)",
            **rl_common.run_record(args, models, ratio, TARGET, busy, baseline, phase, wall),
            "settings": cfg.model_dump(exclude={"policy", "games"}),
            "max_new_tokens": limits,
            "trl": trl.__version__,
        },
    )
    print(
        f"rl_step ratio (grpo phase samples/s / TRL GRPOTrainer samples/s, median of {args.repeats}): "
        f"{ratio:.2f} (target >= {TARGET:.1f})"
    )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args, parser = parse_args(argv, prog)
    rl_common.own_ray()

    import trl

    from cluster.config import load_config, resolve_preset
    from pipelines.config import ChessRLConfig

    config = load_config(ChessRLConfig, path=resolve_preset(args.config))
    cfg = grpo_section(parser, args, config)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-rl-step-grpo-") as tmp:
        work = Path(tmp)
        policy = args.policy or tiny_policy(work)
        games = args.games or sample_games(work)
        models = f"policy {policy}" if args.policy else "untrained tiny policy"
        limits = task_limits(cfg, policy)
        run_cfg = cfg.model_copy(update={"iterations": args.iterations + 1})
        prompts, drawn = plan(config, run_cfg, games, config.run.seed)
        print_setup(args, cfg, models, drawn, limits, trl)
        baseline, phase = run_pairs(args, config, cfg, run_cfg, policy, games, work, prompts, limits)
    report(args, cfg, models, limits, baseline, phase, began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
