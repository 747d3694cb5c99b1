"""``selfplay``: AlphaZero-style training with batched-MCTS collectors, a parameter server, a replay
stream through Ray Data, a Ray Train learner and arena gating.

    python -m pipelines.selfplay --config tiny
    chess-rl selfplay --producer-workers 4 --episodes 32 --mcts-simulations 64 --iterations 200
    chess-rl selfplay --producer-workers 8 --producer-device cuda --use-gpu --storage s3://chess-runs

How the pieces fit:

1. The driver builds the generation-0 network (seeded), saves it as ``gen0.pt`` and ``best.pt``
   under ``<storage>/<run>/selfplay/``, and publishes it to the ``ParameterServer`` actor as
   version 0.
2. ``--producer-workers N`` ``SelfPlayCollector`` actors each play ``concurrent_games`` games at
   once with the best network (one network call per round of leaves across their games), write
   finished positions as fixed-size Parquet shards under ``replay/<version>/`` and put a note of
   each shard on a bounded queue (``--producer-queue-size``). With 0 producers the learner plays
   its own games between training rounds, as the seed does.
3. The learner is a Ray Train ``TorchTrainer``. Each iteration it waits for ``--episodes`` new
   games, reads the newest shards (``window_positions``) through Ray Data, and trains
   ``train_ratio`` x the new positions on AlphaZero's loss (policy cross-entropy + value MSE +
   L2), with gradient accumulation and AMP on CUDA.
4. Every ``--checkpoint-interval`` iterations it saves ``<run>_stepXXXX.pt`` and a Ray Train
   checkpoint, and plays an arena gate: the new network against the best, ``gate_games`` games;
   at ``gate_threshold`` or better it is promoted and published, and the collectors switch to
   it between moves.
5. At the end the best network plays a random mover and its generation-0 self
   (``eval_games`` each, as Ray tasks), and the phase prints the scores with Elo intervals.

Logs: ``metrics.jsonl`` and TensorBoard event files under ``<storage>/<run>/selfplay/logs``, and
the phase's MLflow run. Running the same command again resumes the learner from its last Ray
Train checkpoint, with the replay already on storage.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chessrl.search.mcts_config import MCTSConfig
from chessrl.search.net_config import NetConfig
from cluster.capacity import sizing_cpus
from cluster.progress import ProgressBoard
from cluster.runtime import on_driver_node, release_actor_name
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult
from pipelines.config import ChessRLConfig, SelfplayConfig
from pipelines.learner import final_metrics, torch_trainer
from pipelines.learner.loop import fit_then_stop, stop_collectors
from pipelines.learner.replay import window_datasets
from pipelines.learner.selfplay import (
    SelfplayLoopConfig,
    load_weights,
    numpy_state,
    save_weights,
    train_loop_per_worker,
)
from pipelines.selfplay_gate import final_evaluation, json_safe

if TYPE_CHECKING:  # the search imports torch: the driver (and --help) does not need it
    from chessrl.search.selfplay import SelfPlaySettings

SUMMARY = one_line("selfplay")
DESCRIPTION = (
    "Collectors play self-play games with batched MCTS and write replay shards; a Ray Train learner\n"
    "trains on a sliding window of them and promotes networks that win an arena gate. Example:\n"
    "  chess-rl selfplay --producer-workers 1 --iterations 40 --mcts-simulations 32"
)


def net_config(cfg: SelfplayConfig) -> NetConfig:
    """The network the section asks for."""
    return NetConfig(**{key: getattr(cfg, key) for key in ("blocks", "channels", "history", "value_hidden")})


#: Each field of the self-play search (``MCTSConfig``) and the section's key it comes from.
MCTS_KEYS = {
    "simulations": "mcts_simulations",
    "c_puct": "mcts_cpuct",
    "dirichlet_alpha": "dirichlet_alpha",
    "dirichlet_eps": "exploration_rate",
    "temperature_moves": "temperature_plies",
    "fpu_reduction": "fpu_reduction",
    "search": "search",
}


def mcts_config(cfg: SelfplayConfig) -> MCTSConfig:
    """The self-play search: the seed's simulations, c_puct and exploration rate (root noise)."""
    return MCTSConfig(**{name: getattr(cfg, key) for name, key in MCTS_KEYS.items()})


def selfplay_settings(cfg: SelfplayConfig) -> SelfPlaySettings:
    """How collectors play their games."""
    from chessrl.search.selfplay import SelfPlaySettings

    keys = ("concurrent_games", "max_plies", "adjudicate_material", "history")
    return SelfPlaySettings(**{key: getattr(cfg, key) for key in keys})


def split_cpus(cpus: int, producers: int, learner_workers: int, use_gpu: bool) -> tuple[float, float]:
    """CPUs each collector and each learner worker reserve. One CPU stays unreserved: the
    learner's Ray Data reads start no task while no CPU is free, however little their tasks ask.

    >>> split_cpus(2, 1, 1, False)     # a 2-CPU laptop: half a CPU each, one for Ray Data
    (0.5, 0.5)
    >>> split_cpus(16, 4, 1, False)    # collectors get one CPU each, the learner the rest
    (1.0, 11.0)
    >>> split_cpus(2, 0, 1, False)     # the learner plays its own games
    (0.0, 1.0)
    """
    spare = max(cpus - 1, 0.5)
    units = producers + (0 if use_gpu else learner_workers)
    collector = min(1.0, spare / max(units, 1)) if producers else 0.0
    if use_gpu:
        return collector, 1.0
    learner = max(collector, (spare - producers * collector) / learner_workers)
    return collector, float(learner if learner < 1 else int(learner))


def check_saved_networks(phase: Storage, net_cfg: NetConfig) -> dict[str, dict[str, Any]]:
    """The networks a resumed run starts from (``gen0.pt``, ``best.pt`` in its folder), those
    there: each readable and made for the network the config asks for; else one clear error."""
    from cluster.errors import ConfigError, InputDataError

    out = {}
    for name in ("gen0.pt", "best.pt"):
        if not phase.exists(name):
            continue
        try:
            out[name] = saved = load_weights(phase, name)
            saved_net = saved["net"]
        except Exception as exc:  # noqa: BLE001 - torch raises many types for a file it cannot read
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputDataError(
                f"{phase.uri_of(name)} is not a network selfplay saved ({first}): use another --run-name, "
                "or delete the file to start again"
            ) from None
        if saved_net != net_cfg.__dict__:
            raise ConfigError(
                f"{phase.uri_of(name)} was made for a network {saved_net}, but selfplay now asks for "
                f"{net_cfg.__dict__} (blocks, channels, history, value_hidden): use another --run-name, or the "
                "same network settings to resume"
            )
    return out


def check_selfplay(config: ChessRLConfig, inputs: Inputs) -> None:
    """Every input of ``selfplay``, before Ray starts: the network, search and game settings,
    and the networks a resumed run starts from (:func:`check_saved_networks`)."""
    from cluster.errors import ConfigError

    cfg = config.selfplay
    try:
        net_cfg = net_config(cfg)
        mcts_config(cfg)
        selfplay_settings(cfg)
    except ValueError as exc:
        raise ConfigError(f"selfplay: {exc}") from None
    if not inputs.will_write("selfplay"):
        check_saved_networks(inputs.folder("selfplay"), net_cfg)


def prepare_networks(context: PhaseContext, phase: Storage, net_cfg: NetConfig) -> tuple[dict[str, Any], int]:
    """Generation 0 (seeded) saved as ``gen0.pt`` and ``best.pt`` on a fresh run; the best network
    so far (checked, :func:`check_saved_networks`) and the network's parameter count, logged."""
    import torch

    from chessrl.search.network import PolicyValueNet, count_parameters

    cfg = context.config.selfplay
    if not phase.exists("gen0.pt"):
        torch.manual_seed(context.config.run.seed)
        gen0 = PolicyValueNet(net_cfg)
        for name in ("gen0.pt", "best.pt"):
            save_weights(phase, name, {"model": gen0.state_dict(), "net": net_cfg.__dict__, "version": 0})
    best_saved = check_saved_networks(phase, net_cfg).get("best.pt") or load_weights(phase, "best.pt")
    params = count_parameters(PolicyValueNet(net_cfg))
    context.log(
        f"network: {cfg.blocks} blocks x {cfg.channels} channels, history {cfg.history} ({params:,} parameters); "
        f"best so far v{best_saved['version']}"
    )
    return best_saved, params


@dataclass
class SelfplayActors:
    """The actors around the learner: the parameter server, the replay queue and the collectors
    (``runs``: their running ``run`` calls)."""

    server_name: str
    namespace: str
    server: Any
    queue: Any
    collectors: list[Any]
    runs: list[Any]

    @classmethod
    def start(
        cls, context: PhaseContext, phase: Storage, best_saved: dict[str, Any], collector_cpus: float
    ) -> SelfplayActors:
        """The server publishing the best network (generation 0, or a resumed run's best), the
        queue and ``producer_workers`` collectors, running; actors a run before left are released."""
        import ray
        from ray.util.queue import Queue

        from actors.parameter_server import ParameterServer
        from actors.selfplay import SelfPlayCollector
        from chessrl.search.network import PolicyValueNet

        cfg, run = context.config.selfplay, context.config.run
        namespace = ray.get_runtime_context().namespace
        server_name = f"{run.name}/parameter-server"
        collector_names = [f"{run.name}/selfplay-collector-{i}" for i in range(cfg.producer_workers)]
        for name in [server_name, f"{run.name}/replay-queue", *collector_names]:
            release_actor_name(name, namespace)
        # both hubs on the driver's node, where no autoscaler takes them away (cluster.runtime)
        server = ParameterServer.options(
            name=server_name, namespace=namespace, scheduling_strategy=on_driver_node()
        ).remote()
        best_model = PolicyValueNet(net_config(cfg))
        best_model.load_state_dict(best_saved["model"])
        ray.get(server.publish.remote(numpy_state(best_model), int(best_saved["version"])))
        queue = Queue(
            maxsize=cfg.producer_queue_size,
            actor_options={
                "num_cpus": 0,
                "name": f"{run.name}/replay-queue",
                "scheduling_strategy": on_driver_node(),
            },
        )
        spec = collector_spec(context, phase, server_name, namespace)
        gpus = 1 if cfg.producer_device == "cuda" else 0
        collectors = [
            SelfPlayCollector.options(name=name, num_cpus=collector_cpus, num_gpus=gpus).remote(
                spec, i, queue
            )
            for i, name in enumerate(collector_names)
        ]
        return cls(server_name, namespace, server, queue, collectors, [c.run.remote() for c in collectors])

    def stop(self) -> list[dict[str, Any]]:
        """Stop and kill every actor; the collectors' summaries."""
        summaries = stop_collectors(self.server, self.collectors, self.runs)
        self.queue.shutdown()
        return summaries


def collector_spec(context: PhaseContext, phase: Storage, server_name: str, namespace: str) -> Any:
    """What every collector of this invocation plays and where it writes."""
    from actors.selfplay import CollectorSpec

    cfg, run = context.config.selfplay, context.config.run
    return CollectorSpec(
        run=run.name,
        replay_uri=phase.uri_of("replay"),
        status_uri=phase.uri_of("collectors"),
        net=net_config(cfg),
        mcts=mcts_config(cfg),
        settings=selfplay_settings(cfg),
        shard_positions=cfg.shard_positions,
        seed=run.seed,
        server_name=server_name,
        namespace=namespace,
        device=cfg.producer_device,
        invocation=uuid.uuid4().hex,
    )


def learner_config(
    context: PhaseContext, phase: Storage, actors: SelfplayActors, cpus: float
) -> SelfplayLoopConfig:
    """The loop config of :func:`pipelines.learner.selfplay.train_loop_per_worker` (``cpus`` per
    worker; the learner reads it as attributes)."""
    cfg, run = context.config.selfplay, context.config.run
    return SelfplayLoopConfig(
        run=run.name,
        phase_uri=phase.uri,
        net=net_config(cfg),
        mcts=mcts_config(cfg),
        settings=selfplay_settings(cfg),
        seed=run.seed,
        episodes=cfg.episodes,
        iterations=cfg.iterations,
        batch_size=cfg.batch_size,
        grad_accum_steps=cfg.grad_accum_steps,
        learning_rate=cfg.learning_rate,
        l2=cfg.l2,
        train_ratio=cfg.train_ratio,
        window_positions=cfg.window_positions,
        shard_positions=cfg.shard_positions,
        checkpoint_interval=cfg.checkpoint_interval,
        gate_games=cfg.gate_games,
        gate_threshold=cfg.gate_threshold,
        gate_max_plies=cfg.gate_max_plies,
        producer_workers=cfg.producer_workers,
        replay_reader=cfg.replay_reader,
        use_gpu=cfg.use_gpu,
        amp=cfg.amp,
        time_limit_s=cfg.time_limit_minutes * 60 if cfg.time_limit_minutes else None,
        cpus_per_worker=cpus,
        server_name=actors.server_name,
        namespace=actors.namespace,
        queue=actors.queue,
        tracking_uri=context.tracking.uri,
        tracking_run_id=context.tracking.run_id,
    )


def plan_line(cfg: SelfplayConfig, collector_cpus: float, learner_cpus: float) -> str:
    """What plays and what learns, for the log."""
    return (
        f"{cfg.producer_workers} collector(s) x {cfg.concurrent_games} games, {cfg.mcts_simulations} simulations "
        f"per move ({collector_cpus:g} CPU each); learner: {cfg.learner_workers} worker(s) x {learner_cpus:g} CPU"
        + (" + 1 GPU" if cfg.use_gpu else "")
        + f"; {cfg.iterations} iterations of {cfg.episodes} games"
        + (f", at most {cfg.time_limit_minutes:g} min" if cfg.time_limit_minutes else "")
    )


def selfplay_summary(
    phase: Storage,
    metrics: dict[str, Any],
    learn_seconds: float,
    best_version: int,
    collectors: list[dict[str, Any]],
    evaluation: dict[str, Any],
    params: int,
) -> dict[str, Any]:
    """The phase's ``summary.json``: the learner's last totals (``metrics``), the collectors'
    summaries and restarts, the evaluation and where the networks are."""
    starts = [int(s.get("starts", 1)) for s in collectors if "starts" in s]
    return {
        "phase": "selfplay",
        "iterations": int(metrics.get("iteration", 0)),
        "steps": int(metrics.get("step", 0)),
        "games": int(metrics.get("games", 0)),
        "positions": int(metrics.get("positions", 0)),
        "best_version": best_version,
        "learn_seconds": round(learn_seconds, 1),
        "collectors": collectors,
        "collector_restarts": sum(s - 1 for s in starts),
        "evaluation": evaluation,
        "parameters": params,
        "checkpoints": phase.uri_of("checkpoints"),
        "best": phase.uri_of("best.pt"),
    }


def summary_lines(
    cfg: SelfplayConfig, summary: dict[str, Any], learn_seconds: float, eval_lines: list[str]
) -> list[str]:
    """The phase's closing lines."""
    collector_games = sum(int(s.get("games", 0)) for s in summary["collectors"])
    return [
        "selfplay summary",
        f"  network       {cfg.blocks} blocks x {cfg.channels} channels ({summary['parameters']:,} parameters), "
        f"best v{summary['best_version']}",
        f"  learner       {summary['iterations']} iterations, {summary['steps']} steps in {learn_seconds:.0f} s",
        f"  self-play     {summary['games']} games trained on, {summary['positions']:,} positions"
        + (
            f"; {cfg.producer_workers} collector(s) played {collector_games} games, "
            f"{summary['collector_restarts']} restart(s)"
            if cfg.producer_workers
            else " (played by the learner)"
        ),
        *(
            ["evaluation (MCTS " + f"{cfg.mcts_simulations} simulations, no noise)"] + eval_lines
            if eval_lines
            else []
        ),
        f"  best          {summary['best']}",
    ]


def run_selfplay(context: PhaseContext) -> PhaseResult:
    """The phase: generation 0 (or the best so far), the actors, the learner until its last
    iteration, then the final evaluation and the summary."""
    cfg = context.config.selfplay
    phase = context.phase_storage("selfplay")
    phase.makedirs()
    net_cfg = net_config(cfg)
    cpus = sizing_cpus()[0]  # the nodes alive, or the first node an autoscaler starts (cluster.capacity)
    collector_cpus, learner_cpus = split_cpus(cpus, cfg.producer_workers, cfg.learner_workers, cfg.use_gpu)
    best_saved, params = prepare_networks(context, phase, net_cfg)
    actors = SelfplayActors.start(context, phase, best_saved, collector_cpus)
    context.log(plan_line(cfg, collector_cpus, learner_cpus))
    board = ProgressBoard(context.log, "iteration", cfg.iterations)
    trainer = torch_trainer(
        context,
        "selfplay",
        train_loop_per_worker,
        learner_config(context, phase, actors, learner_cpus).train_loop_config(),
        num_workers=cfg.learner_workers,
        cpus_per_worker=learner_cpus,
        use_gpu=cfg.use_gpu,
        progress=board,
        **window_datasets(
            cfg.replay_reader,
            phase.child("replay"),
            cfg.window_positions,
            context.config.run.seed,
            net_cfg.input_channels,
        ),
    )
    result, learn_seconds, collectors = fit_then_stop(trainer, board, actors.stop)
    best_saved, gen0_saved = load_weights(phase, "best.pt"), load_weights(phase, "gen0.pt")
    evaluation, eval_lines = final_evaluation(
        context, phase, cpus, (best_saved, gen0_saved), net_cfg.__dict__, mcts_config(cfg).__dict__
    )
    summary = selfplay_summary(
        phase,
        final_metrics(result),
        learn_seconds,
        int(best_saved["version"]),
        collectors,
        evaluation,
        params,
    )
    phase.write_text("summary.json", json.dumps(json_safe(summary), indent=2, sort_keys=True, default=str))
    lines = summary_lines(cfg, summary, learn_seconds, eval_lines)
    return PhaseResult(summary=summary, lines=lines, ok=summary["iterations"] > 0)


PHASE = Phase(
    name="selfplay",
    section="selfplay",
    section_model=SelfplayConfig,
    run=run_selfplay,
    check=check_selfplay,
    folder="selfplay",
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
