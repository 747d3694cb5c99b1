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

import io
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

from chessrl.search.mcts import MCTSConfig
from chessrl.search.network import NetConfig
from chessrl.search.selfplay import SelfPlaySettings
from cluster.progress import ProgressBoard
from cluster.runtime import release_actor_name
from cluster.storage import Storage
from pipelines.config import ChessRLConfig, SelfplayConfig
from pipelines.learner import LearnerLog, torch_trainer
from pipelines.phase import Inputs, Phase, PhaseContext, PhaseResult

SUMMARY = "selfplay: AlphaZero-style training (batched-MCTS collectors, parameter server, Ray Train learner, gating)."
DESCRIPTION = (
    "Collectors play self-play games with batched MCTS and write replay shards; a Ray Train learner\n"
    "trains on a sliding window of them and promotes networks that win an arena gate. Example:\n"
    "  chess-rl selfplay --producer-workers 1 --iterations 40 --mcts-simulations 32"
)


def net_config(cfg: SelfplayConfig) -> NetConfig:
    return NetConfig(
        blocks=cfg.blocks, channels=cfg.channels, history=cfg.history, value_hidden=cfg.value_hidden
    )


def mcts_config(cfg: SelfplayConfig) -> MCTSConfig:
    """The self-play search: the seed's simulations, c_puct and exploration rate (root noise)."""
    return MCTSConfig(
        simulations=cfg.mcts_simulations,
        c_puct=cfg.mcts_cpuct,
        dirichlet_alpha=cfg.dirichlet_alpha,
        dirichlet_eps=cfg.exploration_rate,
        temperature_moves=cfg.temperature_plies,
        fpu_reduction=cfg.fpu_reduction,
        search=cfg.search,
    )


def selfplay_settings(cfg: SelfplayConfig) -> SelfPlaySettings:
    return SelfPlaySettings(
        concurrent_games=cfg.concurrent_games,
        max_plies=cfg.max_plies,
        adjudicate_material=cfg.adjudicate_material,
        history=cfg.history,
    )


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


def save_weights(storage: Storage, rel: str, state: dict[str, Any]) -> None:
    """``torch.save`` a dict to storage, atomically."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    storage.write_bytes(rel, buffer.getvalue())


def load_weights(storage: Storage, rel: str) -> dict[str, Any]:
    import torch

    return torch.load(io.BytesIO(storage.read_bytes(rel)), map_location="cpu", weights_only=False)


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


def numpy_state(net: Any) -> dict[str, Any]:
    """A module's state dict as CPU numpy arrays (what the parameter server hands out)."""
    return {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}


def train_loop_per_worker(cfg: dict[str, Any]) -> None:
    """The learner, in every Ray Train worker: take new games, train on the window, gate, publish."""
    import copy
    import random

    import ray
    import ray.data
    import ray.train
    import torch
    from ray.train import Checkpoint

    from chessrl.arena.batched_arena import SearchSide, match_record, play_batched_match
    from chessrl.arena.game import random_openings
    from chessrl.search.mcts import NetworkEvaluator
    from chessrl.search.network import PolicyValueNet, alphazero_loss
    from chessrl.search.replay import (
        TRAINING_COLUMNS,
        decode_rows,
        list_shards,
        positions_table,
        shard_path,
        write_shard,
    )
    from chessrl.search.selfplay import SelfPlay
    from cluster.progress import report_progress
    from cluster.tracking import RunMetricsLogger

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    lead = rank == 0
    threads = max(1, int(cfg["cpus_per_worker"]))
    torch.set_num_threads(max(1, threads))
    use_gpu = bool(cfg["use_gpu"]) and torch.cuda.is_available()
    device = ray.train.torch.get_device() if use_gpu else torch.device("cpu")
    amp = use_gpu and bool(cfg["amp"])
    amp_dtype = torch.bfloat16 if amp and torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=amp and amp_dtype == torch.float16)
    ray.data.DataContext.get_current().enable_progress_bars = False

    phase = Storage.from_uri(cfg["phase_uri"])
    replay = phase.child("replay")
    net_cfg = NetConfig(**cfg["net"])
    mcts = MCTSConfig(**cfg["mcts"])
    settings = SelfPlaySettings(**cfg["settings"])
    net = PolicyValueNet(net_cfg)
    net.load_state_dict(load_weights(phase, "gen0.pt")["model"])
    state: dict[str, Any] = {
        "iteration": 0, "step": 0, "best_version": 0, "window": [], "games": 0, "positions": 0,
        "learn_seconds": 0.0, "gates": [], "results": {}, "own_shards": 0,
    }  # fmt: skip
    optimizer = torch.optim.AdamW(net.parameters(), lr=cfg["learning_rate"], weight_decay=0.0)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            saved = torch.load(os.path.join(folder, "learner.pt"), map_location="cpu", weights_only=False)
        net.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        if lead:
            print(
                f"[selfplay] learner resumes at iteration {state['iteration']}, step {state['step']}",
                flush=True,
            )
    net.to(device)
    model = ray.train.torch.prepare_model(net) if world > 1 else net
    best = copy.deepcopy(net).eval()
    best_saved = load_weights(phase, "best.pt")
    best.load_state_dict(best_saved["model"])
    # best.pt may be newer than the last checkpoint (a promotion between checkpoints)
    state["best_version"] = max(int(state["best_version"]), int(best_saved["version"]))
    own = [rel for rel in list_shards(replay) if "/shard-99-" in rel]
    state["own_shards"] = 1 + max((int(rel.rsplit("-", 1)[1].split(".")[0]) for rel in own), default=-1)
    server = ray.get_actor(cfg["server_name"], namespace=cfg["namespace"])
    queue = cfg["queue"]
    mlflow = RunMetricsLogger(cfg["tracking_uri"], cfg["tracking_run_id"]) if lead else None
    log = LearnerLog(phase.child("logs")) if lead else None
    own_play = None
    if cfg["producer_workers"] == 0 and lead:
        own_play = SelfPlay(
            NetworkEvaluator(best), mcts, settings, seed=cfg["seed"] * 1000 + 999 + state["iteration"],
            game_prefix=f"learner-i{state['iteration']}-s{state['own_shards']}", network_version=state["best_version"],
        )  # fmt: skip
    started = time.perf_counter() - state["learn_seconds"]
    time_limit = cfg["time_limit_s"]
    rng = random.Random(cfg["seed"] + state["iteration"])

    def broadcast(obj: Any) -> Any:
        if world == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def new_games() -> dict[str, Any] | None:
        """Rank 0: the notes of at least ``episodes`` new games (None: out of time)."""
        notes: list[dict[str, Any]] = []
        games = 0
        if own_play is not None:
            finished = own_play.play(cfg["episodes"])
            table = positions_table(finished)
            rel = shard_path(state["best_version"], 99, state["own_shards"])
            state["own_shards"] += 1
            write_shard(replay, rel, table)
            return {
                "shards": [rel], "rows": table.num_rows,
                "results": [g.result for g in finished], "terminations": [g.termination for g in finished],
                "plies": [len(g.moves) for g in finished],
            }  # fmt: skip
        from ray.util.queue import Empty

        while games < cfg["episodes"]:
            if time_limit is not None and time.perf_counter() - started > time_limit:
                return None
            try:
                note = queue.get(block=True, timeout=1.0)
            except Empty:
                failure = ray.get(server.failure.remote())
                if failure:
                    raise RuntimeError(f"a self-play collector failed: {failure}") from None
                continue
            notes.append(note)
            games += len(note["results"])
        return {
            "shards": [n["shard"] for n in notes], "rows": sum(n["rows"] for n in notes),
            "results": [r for n in notes for r in n["results"]],
            "terminations": [t for n in notes for t in n["terminations"]],
            "plies": [p for n in notes for p in n["plies"]],
        }  # fmt: skip

    def window_files() -> list[str]:
        """The newest shards holding about ``window_positions`` (rows are fixed per shard, except
        the learner's own)."""
        picked, rows = [], 0
        for rel, n in reversed(state["window"]):
            if rows >= cfg["window_positions"]:
                break
            picked.append(rel)
            rows += n
        return picked

    def batches(files: list[str]) -> Any:
        """Endless shuffled numpy batches of this rank's share of ``files``, through Ray Data."""
        mine = files[rank::world] or files
        epoch = 0
        while True:
            order = list(mine)
            rng.shuffle(order)
            dataset = ray.data.read_parquet(
                [replay.path(rel) for rel in order], filesystem=replay.fs, num_cpus=0
            ).select_columns(TRAINING_COLUMNS)
            yield from dataset.iter_batches(
                batch_size=cfg["batch_size"],
                batch_format="numpy",
                local_shuffle_buffer_size=max(cfg["batch_size"] * 8, 2048),
                local_shuffle_seed=cfg["seed"] + state["step"] + epoch,
                drop_last=False,  # a window smaller than a batch still trains
            )
            epoch += 1

    metrics: dict[str, Any] = {}  # the last iteration's, also in the final report (a sweep's metric)
    first_iteration = state["iteration"]
    while state["iteration"] < cfg["iterations"]:
        out_of_time = time_limit is not None and time.perf_counter() - started > time_limit
        if broadcast(out_of_time if lead else None):  # rank 0 decides, so that every rank stops together
            break
        generation_started = time.perf_counter()
        got = broadcast(new_games() if lead else None)
        if got is None:
            break
        wait_s = time.perf_counter() - generation_started
        state["iteration"] += 1
        state["games"] += len(got["results"])
        state["positions"] += got["rows"]
        for result in got["results"]:
            state["results"][result] = state["results"].get(result, 0) + 1
        if own_play is not None:
            state["window"].append((got["shards"][0], got["rows"]))
        else:
            state["window"] += [(rel, cfg["shard_positions"]) for rel in got["shards"]]
        state["window"] = state["window"][-4096:]  # far more than any window needs; keeps checkpoints small
        files = window_files()
        per_step = cfg["batch_size"] * cfg["grad_accum_steps"] * world
        steps = max(1, math.ceil(cfg["train_ratio"] * got["rows"] / per_step))
        model.train()
        train_started = time.perf_counter()
        sums = {"loss": 0.0, "policy_ce": 0.0, "value_mse": 0.0}
        stream = batches(files)
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            for _micro in range(cfg["grad_accum_steps"]):
                raw = next(stream)
                decoded = decode_rows(
                    raw["planes"],
                    raw["policy_indices"],
                    raw["policy_probs"],
                    raw["value"],
                    net_cfg.input_channels,
                )
                planes = torch.from_numpy(decoded.planes).to(device)
                target_pi = torch.from_numpy(decoded.policy).to(device)
                target_z = torch.from_numpy(decoded.value).to(device)
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
                    logits, values = model(planes)
                total, policy_ce, value_mse = alphazero_loss(
                    logits.float(), values.float(), target_pi, target_z, net, l2=cfg["l2"]
                )
                scaler.scale(total / cfg["grad_accum_steps"]).backward()
                sums["loss"] += total.item() / cfg["grad_accum_steps"]
                sums["policy_ce"] += policy_ce.item() / cfg["grad_accum_steps"]
                sums["value_mse"] += value_mse.item() / cfg["grad_accum_steps"]
            scaler.step(optimizer)
            scaler.update()
            state["step"] += 1
        stream.close()
        train_s = time.perf_counter() - train_started
        model.eval()
        results = Counter(got["results"])
        metrics = {
            "iteration": state["iteration"],
            "step": state["step"],
            **{k: v / steps for k, v in sums.items()},
            "games": state["games"],
            "positions": state["positions"],
            "window_positions": sum(n for rel, n in state["window"] if rel in set(files)),
            "new_games": len(got["results"]),
            "new_positions": got["rows"],
            "white_win_rate": results["1-0"] / max(1, len(got["results"])),
            "black_win_rate": results["0-1"] / max(1, len(got["results"])),
            "draw_rate": results["1/2-1/2"] / max(1, len(got["results"])),
            "decisive_by_mate": sum(t == "checkmate" for t in got["terminations"])
            / max(1, len(got["results"])),
            "mean_plies": sum(got["plies"]) / max(1, len(got["plies"])),
            "wait_s": wait_s,
            "train_s": train_s,
            "learner_samples_per_s": steps * per_step / max(train_s, 1e-9),
            "best_version": state["best_version"],
        }
        gate_now = state["iteration"] % cfg["checkpoint_interval"] == 0
        gate_text = ""
        if lead:
            candidate = copy.deepcopy(net).eval()
            if cfg["gate_games"] == 0:
                publish = True
            elif gate_now:
                gate_started = time.perf_counter()
                openings = random_openings(
                    max(1, cfg["gate_games"] // 2), 2, seed=cfg["seed"] + state["iteration"]
                )
                arena_mcts = MCTSConfig(**{**cfg["mcts"], "dirichlet_eps": 0.0})
                games = play_batched_match(
                    SearchSide("new", NetworkEvaluator(candidate), arena_mcts),
                    SearchSide("best", NetworkEvaluator(best), arena_mcts),
                    openings, max_plies=cfg["gate_max_plies"], seed=cfg["seed"] + state["iteration"],
                )  # fmt: skip
                wins, draws, losses = match_record(games, "new")
                score = (wins + 0.5 * draws) / max(1, len(games))
                publish = score >= cfg["gate_threshold"]
                metrics.update(
                    gate_score=score, gate_wins=wins, gate_draws=draws, gate_losses=losses,
                    gate_promoted=int(publish), gate_s=time.perf_counter() - gate_started,
                )  # fmt: skip
                state["gates"].append([state["iteration"], wins, draws, losses, int(publish)])
                gate_text = (
                    f"gate +{wins} ={draws} -{losses} (score {score:.2f}) -> "
                    f"{'promoted' if publish else 'kept the best'}"
                )
            else:
                publish = False
            if publish:
                best.load_state_dict(candidate.state_dict())
                # the iteration, or newer than what the server holds (a resumed run)
                version = ray.get(server.publish.remote(numpy_state(best), state["iteration"]))
                state["best_version"] = version
                save_weights(
                    phase, "best.pt", {"model": best.state_dict(), "net": cfg["net"], "version": version}
                )
                if own_play is not None:
                    own_play.set_evaluator(NetworkEvaluator(best), version)
                metrics["best_version"] = state["best_version"]
        state["learn_seconds"] = time.perf_counter() - started
        metrics["elapsed_s"] = state["learn_seconds"]
        if lead:
            assert log is not None
            log.write(metrics, state["step"])
            if mlflow is not None:
                mlflow.log(metrics, step=state["step"])
            report_progress(
                cfg["progress"], state["iteration"],
                f"{state['games']} games, {state['positions']} positions, step {state['step']}, "
                f"loss {metrics['loss']:.3f} (policy {metrics['policy_ce']:.3f}, value {metrics['value_mse']:.3f}), "
                f"{len(got['results']) / max(wait_s + train_s, 1e-9):.2f} games/s, "
                + (f"{gate_text}, " if gate_text else "") + f"best v{state['best_version']}",
                start=first_iteration, show=True,
            )  # fmt: skip
        save = gate_now or state["iteration"] >= cfg["iterations"]
        if save and lead:
            snapshot = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
                        "net": cfg["net"]}  # fmt: skip
            save_weights(phase.child("checkpoints"), f"{cfg['run']}_step{state['step']:04d}.pt", snapshot)
            folder = tempfile.mkdtemp(prefix="selfplay-ckpt-")
            torch.save(snapshot, os.path.join(folder, "learner.pt"))
            assert log is not None
            log.sync()
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(folder),
                         delete_local_checkpoint_after_upload=True)
        else:
            ray.train.report(metrics)
    if lead:
        ray.get(server.stop.remote())
        save_weights(
            phase, "final.pt", {"model": net.state_dict(), "net": cfg["net"], "version": state["iteration"]}
        )
        snapshot = {
            "model": net.state_dict(),
            "optimizer": optimizer.state_dict(),
            "state": state,
            "net": cfg["net"],
        }
        folder = tempfile.mkdtemp(prefix="selfplay-ckpt-")
        torch.save(snapshot, os.path.join(folder, "learner.pt"))
        assert log is not None
        log.close()
        ray.train.report({**metrics, **state_metrics(state), "done": 1}, checkpoint=Checkpoint.from_directory(folder),
                         delete_local_checkpoint_after_upload=True)
    else:
        ray.train.report({"done": 1})


def state_metrics(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "iteration": state["iteration"],
        "step": state["step"],
        "games": state["games"],
        "positions": state["positions"],
        "best_version": state["best_version"],
        "learn_seconds": state["learn_seconds"],
    }


def evaluate_chunk(
    best_state: dict[str, Any], gen0_state: dict[str, Any], net: dict[str, Any], mcts: dict[str, Any],
    opponent: str, openings: list[Any], max_plies: int, seed: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """A Ray task: the best network (MCTS, no noise) against ``random`` or ``gen0`` from ``openings``."""
    import torch

    from chessrl.arena.batched_arena import SearchSide, play_batched_match
    from chessrl.search.mcts import NetworkEvaluator
    from chessrl.search.network import PolicyValueNet

    torch.set_num_threads(1)
    config = NetConfig(**net)
    search = MCTSConfig(**{**mcts, "dirichlet_eps": 0.0})

    def side(name: str, weights: dict[str, Any] | None) -> SearchSide:
        if weights is None:
            return SearchSide(name)
        model = PolicyValueNet(config)
        model.load_state_dict(weights)
        return SearchSide(name, NetworkEvaluator(model.eval()), search)

    new = side("selfplay", best_state)
    other = side("random", None) if opponent == "random" else side("gen0", gen0_state)
    games = play_batched_match(new, other, openings, max_plies=max_plies, seed=seed)
    return [g.to_dict() for g in games]


def run_selfplay(context: PhaseContext) -> PhaseResult:
    import ray
    import torch
    from ray.util.queue import Queue

    from actors.parameter_server import ParameterServer
    from actors.selfplay import CollectorSpec, SelfPlayCollector
    from chessrl.arena.game import ArenaGame, game_pgn, random_openings
    from chessrl.arena.rating import match_elo
    from chessrl.search.network import PolicyValueNet, count_parameters

    cfg = context.config.selfplay
    run = context.config.run
    log = context.log
    phase = context.phase_storage("selfplay")
    phase.makedirs()
    net_cfg = net_config(cfg)
    cpus = int(context.ray.resources.get("CPU", 1))
    collector_cpus, learner_cpus = split_cpus(cpus, cfg.producer_workers, cfg.learner_workers, cfg.use_gpu)
    # generation 0: seeded, saved, published as version 0 (a resumed run publishes its best)
    if not phase.exists("gen0.pt"):
        torch.manual_seed(run.seed)
        gen0 = PolicyValueNet(net_cfg)
        save_weights(phase, "gen0.pt", {"model": gen0.state_dict(), "net": net_cfg.__dict__, "version": 0})
        save_weights(phase, "best.pt", {"model": gen0.state_dict(), "net": net_cfg.__dict__, "version": 0})
    best_saved = check_saved_networks(phase, net_cfg).get("best.pt") or load_weights(phase, "best.pt")
    params = count_parameters(PolicyValueNet(net_cfg))
    log(
        f"network: {cfg.blocks} blocks x {cfg.channels} channels, history {cfg.history} ({params:,} parameters); "
        f"best so far v{best_saved['version']}"
    )

    namespace = ray.get_runtime_context().namespace
    server_name = f"{run.name}/parameter-server"
    for name in [server_name, f"{run.name}/replay-queue"] + [
        f"{run.name}/selfplay-collector-{i}" for i in range(cfg.producer_workers)
    ]:
        release_actor_name(name, namespace)
    server = ParameterServer.options(name=server_name, namespace=namespace).remote()
    best_model = PolicyValueNet(net_cfg)
    best_model.load_state_dict(best_saved["model"])
    ray.get(server.publish.remote(numpy_state(best_model), int(best_saved["version"])))
    queue = Queue(
        maxsize=cfg.producer_queue_size, actor_options={"num_cpus": 0, "name": f"{run.name}/replay-queue"}
    )
    spec = CollectorSpec(
        run=run.name,
        replay_uri=phase.uri_of("replay"),
        status_uri=phase.uri_of("collectors"),
        net=net_cfg,
        mcts=mcts_config(cfg),
        settings=selfplay_settings(cfg),
        shard_positions=cfg.shard_positions,
        seed=run.seed,
        server_name=server_name,
        namespace=namespace,
        device=cfg.producer_device,
        invocation=uuid.uuid4().hex,
    )
    collectors = [
        SelfPlayCollector.options(
            name=f"{run.name}/selfplay-collector-{i}",
            num_cpus=collector_cpus,
            num_gpus=1 if cfg.producer_device == "cuda" else 0,
        ).remote(spec, i, queue)
        for i in range(cfg.producer_workers)
    ]
    runs = [c.run.remote() for c in collectors]
    cpus_per_worker = learner_cpus
    log(
        f"{cfg.producer_workers} collector(s) x {cfg.concurrent_games} games, {cfg.mcts_simulations} simulations "
        f"per move ({collector_cpus:g} CPU each); learner: {cfg.learner_workers} worker(s) x {cpus_per_worker:g} CPU"
        + (" + 1 GPU" if cfg.use_gpu else "")
        + f"; {cfg.iterations} iterations of {cfg.episodes} games"
        + (f", at most {cfg.time_limit_minutes:g} min" if cfg.time_limit_minutes else "")
    )
    trainer = torch_trainer(
        context,
        "selfplay",
        train_loop_per_worker,
        {
            "run": run.name,
            "phase_uri": phase.uri,
            "net": net_cfg.__dict__,
            "mcts": mcts_config(cfg).__dict__,
            "settings": selfplay_settings(cfg).__dict__,
            "seed": run.seed,
            "episodes": cfg.episodes,
            "iterations": cfg.iterations,
            "time_limit_s": cfg.time_limit_minutes * 60 if cfg.time_limit_minutes else None,
            "batch_size": cfg.batch_size,
            "grad_accum_steps": cfg.grad_accum_steps,
            "learning_rate": cfg.learning_rate,
            "l2": cfg.l2,
            "train_ratio": cfg.train_ratio,
            "window_positions": cfg.window_positions,
            "shard_positions": cfg.shard_positions,
            "checkpoint_interval": cfg.checkpoint_interval,
            "gate_games": cfg.gate_games,
            "gate_threshold": cfg.gate_threshold,
            "gate_max_plies": cfg.gate_max_plies,
            "producer_workers": cfg.producer_workers,
            "use_gpu": cfg.use_gpu,
            "amp": cfg.amp,
            "cpus_per_worker": cpus_per_worker,
            "server_name": server_name,
            "namespace": namespace,
            "queue": queue,
            "tracking_uri": context.tracking.uri,
            "tracking_run_id": context.tracking.run_id,
        },
        num_workers=cfg.learner_workers,
        cpus_per_worker=cpus_per_worker,
        use_gpu=cfg.use_gpu,
        progress=(board := ProgressBoard(log, "iteration", cfg.iterations)),
    )
    started = time.perf_counter()
    try:
        with board:
            result = trainer.fit()
    finally:
        ray.get(server.stop.remote())
        collector_summaries = []
        for c, ref in zip(collectors, runs, strict=True):
            try:
                collector_summaries.append(ray.get(ref, timeout=120))
            except Exception as exc:  # a collector that cannot stop cleanly is reported, not fatal
                collector_summaries.append({"error": str(exc).splitlines()[0]})
            ray.kill(c)
        ray.kill(server)
        queue.shutdown()
    learn_seconds = time.perf_counter() - started
    metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
    best_saved = load_weights(phase, "best.pt")
    gen0_saved = load_weights(phase, "gen0.pt")

    evaluation: dict[str, Any] = {}
    eval_lines: list[str] = []
    if cfg.eval_games:
        eval_started = time.perf_counter()
        chunks = max(1, min(cpus, cfg.eval_games // 2))
        task = ray.remote(num_cpus=1)(evaluate_chunk)
        pending = {}
        for opponent, seed in (("random", run.seed + 101), ("gen0", run.seed + 202)):
            openings = random_openings(math.ceil(cfg.eval_games / 2), 2, seed=seed)
            pending[opponent] = [
                task.remote(
                    best_saved["model"],
                    gen0_saved["model"],
                    net_cfg.__dict__,
                    mcts_config(cfg).__dict__,
                    opponent,
                    openings[i::chunks],
                    cfg.eval_max_plies,
                    seed + i,
                )  # fmt: skip
                for i in range(chunks)
                if openings[i::chunks]
            ]
        pgn: list[str] = []
        for opponent, refs in pending.items():
            games = [ArenaGame.from_dict(d) for chunk in ray.get(refs) for d in chunk]
            wins = sum(g.score_for("selfplay") == 1.0 for g in games)
            draws = sum(g.score_for("selfplay") == 0.5 for g in games)
            losses = len(games) - wins - draws
            elo = match_elo(wins, draws, losses)
            terminations = Counter(g.termination for g in games)
            evaluation[opponent] = {
                "games": len(games), "wins": wins, "draws": draws, "losses": losses,
                "score": (wins + 0.5 * draws) / max(1, len(games)),
                "elo": elo.elo, "elo_low": elo.low, "elo_high": elo.high,
                "terminations": dict(terminations),
            }  # fmt: skip
            pgn += [
                game_pgn(g, event=f"selfplay {run.name}: best v{best_saved['version']} vs {opponent}")
                for g in games
            ]
            e = evaluation[opponent]
            eval_lines.append(
                f"  vs {opponent:<9} +{wins} ={draws} -{losses}  score {e['score']:.1%}, Elo {_elo_text(e)} "
                f"({', '.join(f'{k} {v}' for k, v in terminations.most_common())})"
            )
        evaluation["seconds"] = round(time.perf_counter() - eval_started, 1)
        phase.write_text("eval/games.pgn", "\n\n".join(pgn) + "\n")
        phase.write_text("eval/results.json", json.dumps(json_safe(evaluation), indent=2, sort_keys=True))
        context.tracking.log_metrics(
            {f"eval_{opp}_{k}": v for opp, e in evaluation.items() if isinstance(e, dict)
             for k, v in e.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        )  # fmt: skip

    collector_games = sum(int(s.get("games", 0)) for s in collector_summaries)
    starts = [int(s.get("starts", 1)) for s in collector_summaries if "starts" in s]
    summary = {
        "phase": "selfplay",
        "iterations": int(metrics.get("iteration", 0)),
        "steps": int(metrics.get("step", 0)),
        "games": int(metrics.get("games", 0)),
        "positions": int(metrics.get("positions", 0)),
        "best_version": int(best_saved["version"]),
        "learn_seconds": round(learn_seconds, 1),
        "collectors": collector_summaries,
        "collector_restarts": sum(s - 1 for s in starts),
        "evaluation": evaluation,
        "parameters": params,
        "checkpoints": phase.uri_of("checkpoints"),
        "best": phase.uri_of("best.pt"),
    }
    phase.write_text("summary.json", json.dumps(json_safe(summary), indent=2, sort_keys=True, default=str))
    lines = [
        "selfplay summary",
        f"  network       {cfg.blocks} blocks x {cfg.channels} channels ({params:,} parameters), best v{summary['best_version']}",
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
    return PhaseResult(summary=summary, lines=lines, ok=summary["iterations"] > 0)


def json_safe(value: Any) -> Any:
    """``value`` with infinite floats as the strings "inf" / "-inf" (strict JSON has no Infinity).

    >>> json_safe({"elo_high": float("inf"), "x": [1.5, float("-inf")]})
    {'elo_high': 'inf', 'x': [1.5, '-inf']}
    """
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _elo_text(e: dict[str, Any]) -> str:
    low, high = e["elo_low"], e["elo_high"]  # as many decimals as keep the two ends apart
    digits = next(
        (d for d in range(12) if 2 * 10**-d <= high - low and f"{low:+.{d}f}" != f"{high:+.{d}f}"), 12
    )

    def fmt(x: float) -> str:
        return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:+.{digits}f}"

    return f"{fmt(e['elo'])} [{fmt(e['elo_low'])}, {fmt(e['elo_high'])}]"


PHASE = Phase(
    name="selfplay", section="selfplay", section_model=SelfplayConfig, run=run_selfplay, check=check_selfplay,
    summary=SUMMARY, description=DESCRIPTION)  # fmt: skip
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
