"""Bench: PPO samples/s of the ``ppo`` phase (a RolloutCollector, a RewardServer and the Ray Train
learner on an embedded local Ray of 2 CPUs) ÷ the same algorithm in one process with no Ray
(sampling, scoring and training in turn), same models, settings and batch sizes. Median of
``--repeats`` runs of each side, the ratio on the last line.

    .venv/bin/python bench/rl_step.py                      # untrained tiny policy and reward model
    .venv/bin/python bench/rl_step.py --policy runs/demo/sft/model --reward-model runs/demo/reward/model
    .venv/bin/python bench/rl_step.py --iterations 4 --repeats 3 --games runs/demo/prepare/games
    .venv/bin/python bench/rl_step.py --algo grpo           # GRPO against TRL's GRPOTrainer: bench/grpo_step.py

A sample is one policy action the learner trained on. Both sides take the ``ppo`` section of the
tiny preset (``--config`` for another) with ``critic_warmup`` 0 (every iteration moves the
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
import contextlib
import copy
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.record import write_record  # noqa: E402

TARGET = 1.2
NUM_CPUS = 2
#: Cores of other processes' load above which a run is flagged: a 2-thread baseline sharing 2 CPUs
#: with another busy process runs many times slower (its threads wait on each other).
BUSY_CORES = 0.3


def cpu_description() -> str:
    """``AMD EPYC, AVX512-BF16``: the CPU's model name and the widest vector extension it has."""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    for flag, label in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"),
                        ("avx2", "AVX2")):  # fmt: skip
        if flag in flags:
            return f"{name}, {label}"
    return name


class LoadMonitor:
    """Cores that processes other than this one and its descendants (a phase's Ray processes
    included) kept busy between ``start()`` and ``stop()``, polled every ``interval`` seconds so
    that descendants that exit before the end are still counted as ours."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.own: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _sample(self) -> float:
        import psutil  # a dependency of Ray

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
                self.own[proc.pid] = cpu.user + cpu.system + cpu.children_user + cpu.children_system
        times = psutil.cpu_times()
        return sum(getattr(times, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                self._sample()

    def start(self) -> LoadMonitor:
        self.busy0 = self._sample()
        self.own0 = sum(self.own.values())
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join()
        try:
            busy = self._sample()
        except Exception:  # noqa: BLE001 - no psutil: no figure
            return None
        seconds = time.perf_counter() - self.t0
        own = sum(self.own.values()) - self.own0
        return max(0.0, (busy - self.busy0 - own) / seconds) if seconds > 0 else None


def wait_until_quiet(limit_s: float, cores: float = BUSY_CORES) -> float:
    """Wait (up to ``limit_s``) until the machine kept fewer than ``cores`` busy over 2 s; returns
    the seconds waited. Nothing of this bench runs meanwhile, so all of that load is others'."""
    import psutil

    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        if psutil.cpu_percent(interval=2.0) / 100 * (os.cpu_count() or 1) < cores:
            break
    return time.perf_counter() - started


def fmt_load(cores: float | None) -> str:
    if cores is None:
        return "n/a"
    return f"{cores:.2f} cores" + (" - CONTAMINATED" if cores > BUSY_CORES else "")


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


def episode_pool(games: str | None, cfg: Any, seed: int) -> list[tuple[str, ...]]:
    """The phase's start pool (:func:`pipelines.ppo.start_pool`): cut games, or the start position."""
    from pipelines.ppo import start_pool

    if not games:
        return [()]
    context = SimpleNamespace(config=SimpleNamespace(run=SimpleNamespace(seed=seed)))
    return start_pool(context, cfg.model_copy(update={"games": games}))  # type: ignore[arg-type]


def baseline_run(
    policy_path: str, reward_path: str, cfg: Any, pool: list[tuple[str, ...]], iterations: int, seed: int,
    threads: int,
) -> dict[str, Any]:  # fmt: skip
    """``iterations`` + 1 PPO iterations in this process; samples/s of all but the first."""
    import torch

    from chessrl.lm.legality import MoveTokens
    from chessrl.lm.models import load_pretrained
    from chessrl.rl.ppo import (
        make_batch,
        play_episodes,
        policy_opponent,
        ppo_iteration,
        ppo_update,
        random_opponent,
        start_positions,
    )
    from chessrl.rl.reward import (
        Normalizer,
        RewardQuery,
        load_reward_model,
        query_ids,
        reward_format,
        score_ids,
    )
    from pipelines.ppo import ppo_settings

    torch.set_num_threads(threads)
    settings = ppo_settings(cfg)
    policy, tokenizer = load_pretrained(policy_path)
    policy.eval()
    reference = copy.deepcopy(policy).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    critic, _ = load_reward_model(reward_path)
    scorer, reward_tokenizer = load_reward_model(reward_path)
    normalizer = Normalizer.from_config(scorer.config)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    reward_pad = reward_tokenizer.pad_token_id
    if reward_pad is None:
        reward_pad = reward_tokenizer.eos_token_id
    policy_opt = torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=cfg.critic_learning_rate, weight_decay=0.0)
    moves_table = MoveTokens(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    opponents = []
    for k, name in enumerate(cfg.opponents):
        if name == "self":
            opponents.append(policy_opponent(policy, tokenizer, moves_table, settings.temperature, generator))
        elif name == "random":
            opponents.append(random_opponent(seed * 7919 + k))
        else:
            raise SystemExit(f"rl_step: opponent {name!r} is not benched (self and random are)")

    scoring = {"s": 0.0}

    def score(queries: list[tuple[list[str], str]]) -> list[float]:
        began = time.perf_counter()
        reads = reward_format(scorer.config)  # as the RewardServer asks it
        rows = [query_ids(reward_tokenizer, RewardQuery(tuple(moves), move), reads) for moves, move in queries]
        out = [normalizer.apply(s) for s in score_ids(scorer, rows, reward_pad)]
        scoring["s"] += time.perf_counter() - began
        return out

    rows = [{"moves": " ".join(m)} for m in pool]
    rounds = math.ceil(cfg.episodes_per_iteration / cfg.concurrent_games)
    actions = episodes = 0
    started = time.perf_counter()
    play_s = learn_s = 0.0
    for it in range(iterations + 1):
        if it == 1:  # the warm-up iteration is over
            started, actions, episodes, play_s, learn_s = time.perf_counter(), 0, 0, 0.0, 0.0
            scoring["s"] = 0.0
        starts = [
            start_positions(rows, cfg.concurrent_games, seed=seed * 100_003 + it * 1000 + r, max_ply=10**6,
                            prefix=f"b{it}-{r}")
            for r in range(rounds)
        ]  # fmt: skip
        if rounds == 1:
            got = ppo_iteration(
                policy, reference, critic, policy_opt, critic_opt, tokenizer, moves_table, starts[0],
                opponents, settings, cfg.max_actions, it, generator, score,
            )  # fmt: skip
            play_s, learn_s = play_s + got["play_s"], learn_s + got["learn_s"]
        else:  # ppo_iteration's steps, the episodes played in rounds as a collector plays them
            t0 = time.perf_counter()
            policy.eval()
            played = []
            for part in starts:
                played += play_episodes(
                    policy, tokenizer, moves_table, part, opponents, settings, cfg.max_actions, it,
                    generator, score,
                )  # fmt: skip
            t1 = time.perf_counter()
            critic.eval()  # both models in eval mode throughout, as in ppo_iteration and the learner
            batch = make_batch(played, reference, critic, pad, settings, moves_table=moves_table)
            got = ppo_update(policy, critic, policy_opt, critic_opt, batch, pad, settings, generator)
            play_s, learn_s = play_s + t1 - t0, learn_s + time.perf_counter() - t1
        actions += int(got["actions"])
        episodes += rounds * cfg.concurrent_games
    seconds = time.perf_counter() - started
    return {
        "samples_per_s": actions / seconds, "actions": actions, "episodes": episodes, "seconds": seconds,
        "play_s": play_s, "learn_s": learn_s, "episode_length": actions / max(1, episodes),
        "score_s": scoring["s"], "sample_s": play_s - scoring["s"],
    }  # fmt: skip


def phase_run(
    policy_path: str, reward_path: str, cfg: Any, games: str | None, iterations: int, config: str,
    work: Path, index: int, seed: int, timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """``python -m pipelines.ppo`` on a fresh embedded Ray of 2 CPUs; samples/s from its metrics."""
    storage = work / f"phase-{index}"
    argv = [
        sys.executable, "-m", "pipelines.ppo", "--config", config, "--storage", str(storage),
        "--run-name", "bench", "--seed", str(seed), "--no-tracking", "--num-cpus", str(NUM_CPUS),
        "--policy", policy_path, "--reward-model", reward_path, "--iterations", str(iterations + 1),
        "--critic-warmup", "0", "--episodes-per-iteration", str(cfg.episodes_per_iteration),
        "--concurrent-games", str(cfg.concurrent_games), "--max-actions", str(cfg.max_actions),
        "--max-start-ply", str(cfg.max_start_ply), "--opponents", *cfg.opponents,
        # the learner stops itself in time for the export and Ray's shutdown
        "--time-limit-minutes", f"{max(1.0, (timeout_s - 150) / 60):.2f}",
    ] + (["--games", games] if games else [])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    log_path = work / f"phase-{index}.log"
    started = time.perf_counter()
    with open(log_path, "w") as log:
        # a session of its own: on a timeout the phase and the Ray processes it started go together
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            code: int | str = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = "timeout"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)  # the phase shuts its Ray down on an interrupt
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall = time.perf_counter() - started
    metrics = storage / "bench" / "ppo" / "logs" / "metrics.jsonl"
    rows = (
        [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if metrics.is_file()
        else []
    )
    if len(rows) < 2 or (code != 0 and code != "timeout"):
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-40:])
        raise SystemExit(f"rl_step: the ppo phase failed ({code}, {len(rows)} iterations logged):\n{tail}")
    timed = rows[1:]
    collectors = sorted((storage / "bench" / "ppo" / "collectors").glob("collector-*.json"))
    spent: dict[str, float] = {}
    for path in collectors:  # cumulative over the whole run, warm-up included
        for key, value in json.loads(path.read_text()).get("seconds", {}).items():
            spent[key] = spent.get(key, 0.0) + value
    actions = int(sum(r["actions"] for r in timed))
    episodes = int(sum(r["episodes"] for r in timed))
    seconds = rows[-1]["elapsed_s"] - rows[0]["elapsed_s"]
    return {
        "samples_per_s": actions / seconds, "actions": actions, "episodes": episodes, "seconds": seconds,
        "iterations": len(timed), "learn_s": sum(r["learner_step_s"] for r in timed),
        "wait_s": sum(r["wait_s"] for r in timed), "stale_dropped": int(rows[-1].get("stale_dropped", 0)),
        "publish_s": sum(r.get("publish_s", 0.0) for r in timed), "checkpoint_s": sum(r.get("report_s", 0.0) for r in timed),
        "log_s": sum(r.get("log_s", 0.0) for r in timed), "collectors_s": spent,
        "episode_length": actions / max(1, episodes), "phase_seconds": wall, "startup_s": rows[0]["elapsed_s"],
        "exit": code,
    }  # fmt: skip


def print_time_table(baseline: list[dict[str, Any]], phase: list[dict[str, Any]]) -> None:
    """Where each side's timed seconds go (medians over runs): the learner's split in the phase,
    each collector's (summed over collectors, whole run) beside it."""

    def med(rows: list[dict[str, Any]], key: str, sub: str | None = None) -> float:
        values = [(r[key].get(sub, 0.0) if sub else r[key]) for r in rows if key in r]
        return statistics.median(values) if values else float("nan")

    print("where the time goes (s, median of runs):")
    print(f"  baseline: {med(baseline, 'seconds'):.1f} = sample {med(baseline, 'sample_s'):.1f} + "
          f"score {med(baseline, 'score_s'):.1f} + learn {med(baseline, 'learn_s'):.1f}")  # fmt: skip
    other = med(phase, "seconds") - sum(
        med(phase, k) for k in ("learn_s", "wait_s", "publish_s", "checkpoint_s", "log_s")
    )
    print(
        f"  phase learner: {med(phase, 'seconds'):.1f} = wait for rollouts {med(phase, 'wait_s'):.1f} + learn "
        f"{med(phase, 'learn_s'):.1f} + publish weights {med(phase, 'publish_s'):.1f} + checkpoints "
        f"{med(phase, 'checkpoint_s'):.1f} + logging {med(phase, 'log_s'):.1f} + other {other:.1f}"
    )
    kinds = ("sample", "score", "opponents", "weights", "write", "idle")
    print("  phase collectors (whole run, warm-up included): "
          + ", ".join(f"{k} {med(phase, 'collectors_s', k):.1f}" for k in kinds))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    algo = argparse.ArgumentParser(add_help=False)
    algo.add_argument("--algo", choices=("ppo", "grpo"), default="ppo")
    known, rest = algo.parse_known_args(argv)
    if known.algo == "grpo":  # GRPO against TRL's GRPOTrainer: bench/grpo_step.py, its own flags
        from bench.grpo_step import main as grpo_main

        return grpo_main(rest, prog=f"{Path(sys.argv[0]).name} --algo grpo")
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--algo", choices=("ppo", "grpo"), default="ppo",
        help="ppo: this bench; grpo: the grpo phase against TRL's GRPOTrainer (bench/grpo_step.py; its flags: "
        "--algo grpo --help) [default: ppo]",
    )  # fmt: skip
    parser.add_argument("--policy", default=None, help="a saved policy [default: an untrained tiny one]")
    parser.add_argument(
        "--reward-model", default=None, help="its reward model [default: an untrained tiny one]"
    )
    parser.add_argument(
        "--games", default=None, help="a games table to start episodes from [default: the start position]"
    )
    parser.add_argument(
        "--config", default="tiny", help="preset or YAML file whose ppo section both sides use"
    )
    parser.add_argument(
        "--iterations", type=int, default=6, help="timed iterations per run, after one warm-up [default: 6]"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side [default: 3]")
    parser.add_argument(
        "--baseline-threads", type=int, default=NUM_CPUS, help="torch threads of the baseline [default: 2]"
    )
    parser.add_argument(
        "--phase-timeout", type=float, default=600.0,
        help="seconds a phase run may take; its learner stops 150 s before, after the iteration in progress "
        "[default: 600]",
    )  # fmt: skip
    parser.add_argument(
        "--wait-quiet", type=float, default=120.0,
        help="before each run, wait up to this many seconds for other processes to leave the CPUs [default: 120]",
    )  # fmt: skip
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "rl_step.json"))
    args = parser.parse_args(argv)
    if min(args.iterations, args.repeats, args.baseline_threads) < 1:
        parser.error("--iterations, --repeats and --baseline-threads must be >= 1")
    if (args.policy is None) != (args.reward_model is None):
        parser.error("--policy and --reward-model go together")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)

    import torch

    from cluster.config import load_config, resolve_preset
    from pipelines.config import ChessRLConfig
    from pipelines.ppo import check_models

    config = load_config(ChessRLConfig, path=resolve_preset(args.config))
    cfg = config.ppo.model_copy(update={"critic_warmup": 0})
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
        pool = episode_pool(args.games, cfg, config.run.seed)
        print(f"models: {models} (vocab {facts['vocab']}); starts: "
              + (f"{len(pool)} cut games of {args.games}" if args.games else "the start position"))  # fmt: skip
        print(
            f"ppo ({args.config}): {args.iterations} timed iterations (+1 warm-up) of {cfg.episodes_per_iteration} "
            f"episodes, {cfg.concurrent_games} games at once, T={cfg.max_actions}, opponents {', '.join(cfg.opponents)}, "
            f"{cfg.ppo_epochs} epochs of minibatch {cfg.minibatch}; phase: {cfg.collectors} collector(s), "
            f"{cfg.reward_servers} reward server(s), learner on {NUM_CPUS} CPUs; baseline: {args.baseline_threads} "
            f"torch threads"
        )
        print(f"machine: {os.cpu_count()} CPU(s), {cpu_description()}; torch {torch.__version__}")
        baseline: list[dict[str, Any]] = []
        phase: list[dict[str, Any]] = []
        for i in range(args.repeats):
            waited = wait_until_quiet(args.wait_quiet)
            monitor = LoadMonitor().start()
            b = baseline_run(
                policy,
                reward,
                cfg,
                episode_pool(args.games, cfg, config.run.seed + i),
                args.iterations,
                config.run.seed + i,
                args.baseline_threads,
            )
            b["other_load_cores"], b["waited_for_quiet_s"] = monitor.stop(), round(waited, 1)
            baseline.append(b)
            print(
                f"  run {i + 1} baseline {b['samples_per_s']:8.1f} samples/s ({b['actions']} actions, "
                f"{b['episode_length']:.2f} a game, {b['seconds']:.1f} s: play {b['play_s']:.1f}, learn "
                f"{b['learn_s']:.1f}; other load {fmt_load(b['other_load_cores'])})",
                flush=True,
            )
            waited = wait_until_quiet(args.wait_quiet)
            monitor = LoadMonitor().start()
            p = phase_run(policy, reward, cfg, args.games, args.iterations, args.config, work, i,
                          config.run.seed + i, args.phase_timeout)  # fmt: skip
            p["other_load_cores"], p["waited_for_quiet_s"] = monitor.stop(), round(waited, 1)
            phase.append(p)
            print(
                f"  run {i + 1} phase    {p['samples_per_s']:8.1f} samples/s ({p['actions']} actions, "
                f"{p['episode_length']:.2f} a game, {p['seconds']:.1f} s: learner wait {p['wait_s']:.1f}, "
                f"learn {p['learn_s']:.1f}; start-up {p['startup_s']:.0f} s, {p['phase_seconds']:.0f} s end to "
                f"end; other load {fmt_load(p['other_load_cores'])})"
                + (
                    ""
                    if p["iterations"] == args.iterations
                    else f" - {p['iterations']} iterations, stopped ({p['exit']})"
                ),
                flush=True,
            )
    print_time_table(baseline, phase)
    base_med = statistics.median(r["samples_per_s"] for r in baseline)
    phase_med = statistics.median(r["samples_per_s"] for r in phase)
    ratio = phase_med / base_med if base_med else 0.0
    wall = time.perf_counter() - began
    busy = [r["other_load_cores"] for r in baseline + phase if (r["other_load_cores"] or 0) > BUSY_CORES]
    if busy:
        print(f"warning: other processes kept up to {max(busy):.2f} cores busy during {len(busy)} run(s): "
              "the numbers are not this machine's; re-run when it is quiet")  # fmt: skip
    print(
        f"median baseline {base_med:.1f} samples/s; median phase {phase_med:.1f} samples/s; bench {wall:.0f} s"
    )
    write_record(args.json, {
        "bench": "rl_step",
        "ratio_definition": "median PPO samples/s (actions trained on / s) of the ppo phase (collector + "
        "RewardServer + Ray Train learner, embedded Ray of 2 CPUs) / median samples/s of the same iterations "
        "in one process without Ray",
        "ratio": ratio, "target": TARGET, "passed": ratio >= TARGET, "contaminated_runs": len(busy),
        "phase_samples_per_s": [r["samples_per_s"] for r in phase],
        "baseline_samples_per_s": [r["samples_per_s"] for r in baseline],
        "runs": {"baseline": baseline, "phase": phase},
        "models": models, "games": args.games, "config": args.config, "iterations": args.iterations,
        "episodes_per_iteration": cfg.episodes_per_iteration, "concurrent_games": cfg.concurrent_games,
        "max_actions": cfg.max_actions, "opponents": list(cfg.opponents), "baseline_threads": args.baseline_threads,
        "num_cpus": NUM_CPUS, "cpu": cpu_description(), "torch": torch.__version__, "bench_seconds": round(wall, 1),
    })  # fmt: skip
    print(f"rl_step ratio (phase samples/s / one-process samples/s, median of {args.repeats}): "
          f"{ratio:.2f} (target >= {TARGET:g})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
