"""The learner of the ``selfplay`` phase, in every Ray Train worker: take new games, train on the
replay window, gate, publish. Not a phase: :mod:`pipelines.selfplay` starts it.

:func:`train_loop_per_worker` is the algorithm; :class:`SelfplayLearner` holds what it works on
(the networks, the optimizer, the source of new games) and its steps; resuming, the reports,
checkpoints and the end are :class:`pipelines.learner.loop.LoopLearner`'s (``loop``).
"""

from __future__ import annotations

import copy
import io
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from chessrl.search.mcts_config import MCTSConfig
from chessrl.search.net_config import NetConfig
from cluster.storage import Storage
from pipelines.learner.loop import LoopConfig, LoopLearner
from pipelines.learner.replay import DONE, WINDOW, window_batches
from pipelines.selfplay_gate import play_gate

if TYPE_CHECKING:  # its module imports torch: the driver imports this one before it needs it
    from chessrl.search.selfplay import SelfPlaySettings


@dataclass(frozen=True, kw_only=True)
class SelfplayLoopConfig(LoopConfig):
    """What the selfplay learner's workers read, built by the driver
    (:func:`pipelines.selfplay.learner_config`) beside :class:`~pipelines.learner.loop.LoopConfig`'s
    fields, frozen: the workers read it as attributes. Every field is the driver's to set: the
    defaults are the config sections' (``selfplay``, ``run``)."""

    run: str
    """The run's name (the checkpoints' copies are ``checkpoints/<run>_stepXXXX.pt``)."""
    net: NetConfig
    """The network's shape."""
    mcts: MCTSConfig
    """The self-play search (the gate plays it without root noise)."""
    settings: SelfPlaySettings
    """How the learner plays its own games (without collectors)."""
    seed: int
    """The run's seed."""
    episodes: int
    """New games an iteration trains after."""
    batch_size: int
    """Positions a micro-batch, per worker."""
    grad_accum_steps: int
    """Micro-batches an optimizer step."""
    learning_rate: float
    """AdamW's learning rate."""
    l2: float
    """Weight of the L2 penalty of AlphaZero's loss."""
    train_ratio: float
    """Positions trained on an iteration, per new position."""
    window_positions: int
    """The replay window: the newest shards with this many positions."""
    shard_positions: int
    """Positions a collector's shard holds (the window's count of a shard)."""
    gate_games: int
    """Games of the new network against the best at a gate (0: every iteration promotes)."""
    gate_threshold: float
    """The gate's score at which the new network becomes the best."""
    gate_max_plies: int
    """A gate game's most plies."""
    producer_workers: int
    """Collectors (0: the learner plays its own games)."""
    replay_reader: str = "stream"
    """``parquet`` (each worker reads its share of the window, a ``read_parquet`` a pass) or
    ``stream`` (its split of the replay window's stream, :data:`pipelines.learner.replay.WINDOW`)."""
    use_gpu: bool
    """Each worker on its GPU."""
    amp: bool
    """Mixed precision on a GPU."""
    cpus_per_worker: float
    """CPUs each worker reserves (its torch threads)."""
    server_name: str
    """The parameter server actor's name (in ``namespace``)."""
    namespace: str | None
    """The parameter server's Ray namespace."""
    queue: Any
    """The collectors' queue of new games' notes (a ``ray.util.queue.Queue``)."""


def save_weights(storage: Storage, rel: str, state: dict[str, Any]) -> None:
    """``torch.save`` a dict to storage, atomically."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    storage.write_bytes(rel, buffer.getvalue())


def load_weights(storage: Storage, rel: str) -> dict[str, Any]:
    """A dict :func:`save_weights` wrote, on the CPU."""
    import torch

    return torch.load(io.BytesIO(storage.read_bytes(rel)), map_location="cpu", weights_only=False)


def numpy_state(net: Any) -> dict[str, Any]:
    """A module's state dict as CPU numpy arrays (what the parameter server hands out)."""
    return {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}


def fresh_state() -> dict[str, Any]:
    """The state of a learner that starts from generation 0 (a checkpoint carries it as ``state``)."""
    return {
        "iteration": 0,
        "step": 0,
        "best_version": 0,
        "window": [],
        "games": 0,
        "positions": 0,
        "learn_seconds": 0.0,
        "gates": [],
        "results": {},
        "own_shards": 0,
    }


def state_metrics(state: dict[str, Any]) -> dict[str, Any]:
    """The run's totals, for the final report."""
    return {
        "iteration": state["iteration"],
        "step": state["step"],
        "games": state["games"],
        "positions": state["positions"],
        "best_version": state["best_version"],
        "learn_seconds": state["learn_seconds"],
    }


def games_note(shards: list[str], rows: int, games: list[Any]) -> dict[str, Any]:
    """New games as the learner takes them: their shards, positions, results, how they ended and
    their lengths (``games``: finished games, or the notes collectors put on the queue, each with
    its own lists)."""
    if games and isinstance(games[0], dict):
        return {
            "shards": shards,
            "rows": rows,
            "results": [r for n in games for r in n["results"]],
            "terminations": [t for n in games for t in n["terminations"]],
            "plies": [p for n in games for p in n["plies"]],
        }
    return {
        "shards": shards,
        "rows": rows,
        "results": [g.result for g in games],
        "terminations": [g.termination for g in games],
        "plies": [len(g.moves) for g in games],
    }


def iteration_metrics(
    state: dict[str, Any], got: dict[str, Any], files: list[str], trained: dict[str, float], wait_s: float
) -> dict[str, Any]:
    """What an iteration logs: the totals, the losses and speed of its training (``trained``), the
    window and what its new games (``got``) were like."""
    results = Counter(got["results"])
    new = max(1, len(got["results"]))
    window = set(files)
    return {
        "iteration": state["iteration"],
        "step": state["step"],
        **{k: trained[k] for k in ("loss", "policy_ce", "value_mse")},
        "games": state["games"],
        "positions": state["positions"],
        "window_positions": sum(n for rel, n in state["window"] if rel in window),
        "new_games": len(got["results"]),
        "new_positions": got["rows"],
        "white_win_rate": results["1-0"] / new,
        "black_win_rate": results["0-1"] / new,
        "draw_rate": results["1/2-1/2"] / new,
        "decisive_by_mate": sum(t == "checkmate" for t in got["terminations"]) / new,
        "mean_plies": sum(got["plies"]) / max(1, len(got["plies"])),
        "wait_s": wait_s,
        "train_s": trained["train_s"],
        "learner_samples_per_s": trained["learner_samples_per_s"],
        "best_version": state["best_version"],
    }


def progress_text(state: dict[str, Any], metrics: dict[str, Any], got: dict[str, Any], gate_text: str) -> str:
    """The figures of an iteration's progress line."""
    seconds = metrics["wait_s"] + metrics["train_s"]
    return (
        f"{state['games']} games, {state['positions']} positions, step {state['step']}, "
        f"loss {metrics['loss']:.3f} (policy {metrics['policy_ce']:.3f}, value {metrics['value_mse']:.3f}), "
        f"{len(got['results']) / max(seconds, 1e-9):.2f} games/s, "
        + (f"{gate_text}, " if gate_text else "")
        + f"best v{state['best_version']}"
    )


class SelfplayLearner:
    """One Ray Train worker's learner: the network in training, the best one, the optimizer, and
    ``loop`` (:class:`~pipelines.learner.loop.LoopLearner`: the state a checkpoint carries, the
    logs, the reports); on rank 0 also the source of new games and the gate. A worker that finds
    a Ray Train checkpoint resumes from it."""

    def __init__(self, cfg: SelfplayLoopConfig) -> None:
        import random

        import ray
        import ray.data
        import ray.train
        import torch

        from chessrl.search.network import PolicyValueNet

        context = ray.train.get_context()
        self.cfg = cfg
        self.rank, self.world = context.get_world_rank(), context.get_world_size()
        self.lead = self.rank == 0
        self._set_device()
        ray.data.DataContext.get_current().enable_progress_bars = False
        self.phase = Storage.from_uri(cfg.phase_uri)
        self.replay = self.phase.child("replay")
        self.net_cfg = cfg.net
        self.net = PolicyValueNet(self.net_cfg)
        self.net.load_state_dict(load_weights(self.phase, "gen0.pt")["model"])
        # on its device before the optimizer exists: a resumed optimizer's state is then cast to
        # the parameters' device as it loads (moved after, a GPU's first step would mix devices)
        self.net.to(self.device)
        self.optimizer = torch.optim.AdamW(self.net.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
        self.loop = LoopLearner(
            "selfplay",
            cfg,
            fresh_state(),
            {"model": self.net, "optimizer": self.optimizer},
            extra=lambda: {"net": asdict(cfg.net)},
            clock="learn_seconds",
            lead=self.lead,
            report_every_iteration=True,
        )
        self.loop.resume("learner resumes at iteration {iteration}, step {step}")
        self.state = self.loop.state
        self.model = ray.train.torch.prepare_model(self.net) if self.world > 1 else self.net
        self._load_best()
        self.server = ray.get_actor(cfg.server_name, namespace=cfg.namespace)
        self.own_play = self._own_play() if cfg.producer_workers == 0 and self.lead else None
        self.rng = random.Random(cfg.seed + self.state["iteration"])
        self.window = self._window_stream() if cfg.replay_reader == "stream" else None
        self.loop.start_clock()  # learn_seconds counts from here, after the set-up (as it always did)

    def _window_stream(self) -> Any:
        """This worker's endless batches of the replay window's stream, the training columns."""
        import ray.train

        cfg = self.cfg
        return window_batches(
            ray.train.get_dataset_shard(WINDOW),
            cfg.batch_size,
            seed=cfg.seed + 1000 * self.state["iteration"] + self.rank,
            buffer_rows=min(max(cfg.batch_size * 8, 2048), cfg.window_positions),
        )

    def _set_device(self) -> None:
        """Threads, device and mixed precision (AMP on CUDA only; a grad scaler for float16)."""
        import ray.train
        import torch

        torch.set_num_threads(max(1, int(self.cfg.cpus_per_worker)))
        use_gpu = self.cfg.use_gpu
        if use_gpu and not torch.cuda.is_available():  # a GPU node whose torch cannot use it
            raise RuntimeError(
                f"use_gpu is set but this worker's torch {torch.__version__} sees no CUDA device: "
                'install the CUDA build of torch on the GPU nodes (docs/cluster.md, "GPUs")'
            )
        self.device = ray.train.torch.get_device() if use_gpu else torch.device("cpu")
        self.amp = use_gpu and self.cfg.amp
        self.amp_dtype = torch.bfloat16 if self.amp and torch.cuda.is_bf16_supported() else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp and self.amp_dtype == torch.float16)

    def _load_best(self) -> None:
        """The best network (``best.pt``, maybe newer than the last checkpoint: a promotion between
        checkpoints), and how many shards the learner's own games already fill."""
        from chessrl.search.replay import list_shards, shard_age

        self.best = copy.deepcopy(self.net).eval()
        best_saved = load_weights(self.phase, "best.pt")
        self.best.load_state_dict(best_saved["model"])
        self.state["best_version"] = max(int(self.state["best_version"]), int(best_saved["version"]))
        own = [rel for rel in list_shards(self.replay) if "/shard-99-" in rel]
        self.state["own_shards"] = 1 + max((shard_age(rel)[1] for rel in own), default=-1)

    def _own_play(self) -> Any:
        """The learner's own self-play games with the best network (no collectors)."""
        from chessrl.search.mcts import NetworkEvaluator
        from chessrl.search.selfplay import SelfPlay

        state = self.state
        return SelfPlay(
            NetworkEvaluator(self.best),
            self.cfg.mcts,
            self.cfg.settings,
            seed=self.cfg.seed * 1000 + 999 + state["iteration"],
            game_prefix=f"learner-i{state['iteration']}-s{state['own_shards']}",
            network_version=state["best_version"],
        )

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world == 1:
            return obj
        import torch

        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def out_of_time(self) -> bool:
        """Whether the run's time limit has passed (every rank stops together, as rank 0 says)."""
        return bool(self.broadcast(self.loop.out_of_time() if self.lead else None))

    def new_games(self) -> dict[str, Any] | None:
        """Every rank: rank 0's notes of at least ``episodes`` new games (None: out of time)."""
        if not self.lead:
            return self.broadcast(None)
        if self.own_play is not None:
            return self.broadcast(self._play_own())
        return self.broadcast(self._queued_games())

    def _play_own(self) -> dict[str, Any]:
        """Rank 0 without collectors: play ``episodes`` games and write them as one shard."""
        from chessrl.search.replay import positions_table, shard_path, write_shard

        finished = self.own_play.play(self.cfg.episodes)
        table = positions_table(finished)
        rel = shard_path(self.state["best_version"], 99, self.state["own_shards"])
        self.state["own_shards"] += 1
        write_shard(self.replay, rel, table)
        return games_note([rel], table.num_rows, finished)

    def _queued_games(self) -> dict[str, Any] | None:
        """Rank 0: the collectors' notes of at least ``episodes`` games, from the queue; a
        collector's failure is raised (None: out of time)."""
        import ray
        from ray.util.queue import Empty

        notes: list[dict[str, Any]] = []
        games = 0
        while games < self.cfg.episodes:
            if self.loop.out_of_time():
                return None
            try:
                note = self.cfg.queue.get(block=True, timeout=1.0)
            except Empty:
                failure = ray.get(self.server.failure.remote())
                if failure:
                    raise RuntimeError(f"a self-play collector failed: {failure}") from None
                continue
            notes.append(note)
            games += len(note["results"])
        return games_note([n["shard"] for n in notes], sum(n["rows"] for n in notes), notes)

    def take(self, got: dict[str, Any]) -> list[str]:
        """Count new games in the state, add their shards to the window; the window's files."""
        from chessrl.search.replay import newest_shards

        state = self.state
        state["iteration"] += 1
        state["games"] += len(got["results"])
        state["positions"] += got["rows"]
        for result in got["results"]:
            state["results"][result] = state["results"].get(result, 0) + 1
        if self.own_play is not None:
            state["window"].append((got["shards"][0], got["rows"]))
        else:
            state["window"] += [(rel, self.cfg.shard_positions) for rel in got["shards"]]
        state["window"] = state["window"][-4096:]  # far more than any window needs; keeps checkpoints small
        return newest_shards(state["window"], self.cfg.window_positions)

    def batches(self, files: list[str]) -> Any:
        """Endless shuffled numpy batches of this rank's share of ``files``, through Ray Data."""
        import ray.data

        from chessrl.search.replay import TRAINING_COLUMNS

        mine = files[self.rank :: self.world] or files
        epoch = 0
        while True:
            order = list(mine)
            self.rng.shuffle(order)
            dataset = ray.data.read_parquet(
                [self.replay.path(rel) for rel in order], filesystem=self.replay.fs, num_cpus=0
            ).select_columns(TRAINING_COLUMNS)
            yield from dataset.iter_batches(
                batch_size=self.cfg.batch_size,
                batch_format="numpy",
                local_shuffle_buffer_size=max(self.cfg.batch_size * 8, 2048),
                local_shuffle_seed=self.cfg.seed + self.state["step"] + epoch,
                drop_last=False,  # a window smaller than a batch still trains
            )
            epoch += 1

    def train(self, files: list[str], rows: int) -> dict[str, float]:
        """``train_ratio`` x ``rows`` positions of ``files`` (at least one step): the mean losses,
        the seconds and the samples per second."""
        cfg = self.cfg
        per_step = cfg.batch_size * cfg.grad_accum_steps * self.world
        steps = max(1, math.ceil(cfg.train_ratio * rows / per_step))
        self.model.train()
        started = time.perf_counter()
        sums = {"loss": 0.0, "policy_ce": 0.0, "value_mse": 0.0}
        stream = self.window if self.window is not None else self.batches(files)
        for _ in range(steps):
            self.optimizer.zero_grad(set_to_none=True)
            for _micro in range(cfg.grad_accum_steps):
                self._micro_step(next(stream), sums)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.state["step"] += 1
        if stream is not self.window:
            stream.close()
        train_s = time.perf_counter() - started
        self.model.eval()
        return {
            **{k: v / steps for k, v in sums.items()},
            "train_s": train_s,
            "learner_samples_per_s": steps * per_step / max(train_s, 1e-9),
        }

    def _micro_step(self, raw: dict[str, Any], sums: dict[str, float]) -> None:
        """Forward and backward on one batch (AlphaZero's loss), adding its losses to ``sums``."""
        import torch

        from chessrl.search.network import alphazero_loss
        from chessrl.search.replay import decode_rows

        accum = self.cfg.grad_accum_steps
        decoded = decode_rows(
            raw["planes"],
            raw["policy_indices"],
            raw["policy_probs"],
            raw["value"],
            self.net_cfg.input_channels,
        )
        planes = torch.from_numpy(decoded.planes).to(self.device)
        target_pi = torch.from_numpy(decoded.policy).to(self.device)
        target_z = torch.from_numpy(decoded.value).to(self.device)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp):
            logits, values = self.model(planes)
        total, policy_ce, value_mse = alphazero_loss(
            logits.float(), values.float(), target_pi, target_z, self.net, l2=self.cfg.l2
        )
        self.scaler.scale(total / accum).backward()
        sums["loss"] += total.item() / accum
        sums["policy_ce"] += policy_ce.item() / accum
        sums["value_mse"] += value_mse.item() / accum

    def gate(self, metrics: dict[str, Any], gate_now: bool) -> str:
        """Rank 0: whether the new network replaces the best (always without gate games; at a gate
        iteration if it wins its gate), adding the gate's figures to ``metrics``; the gate's
        words for the progress line ("" without a gate)."""
        cfg, state = self.cfg, self.state
        text = ""
        if cfg.gate_games == 0:
            publish = True
        elif gate_now:
            gate_started = time.perf_counter()
            wins, draws, losses = play_gate(
                copy.deepcopy(self.net).eval(),
                self.best,
                state["iteration"],
                games=cfg.gate_games,
                mcts=cfg.mcts,
                max_plies=cfg.gate_max_plies,
                seed=cfg.seed,
            )
            score = (wins + 0.5 * draws) / max(1, wins + draws + losses)
            publish = score >= cfg.gate_threshold
            metrics.update(
                gate_score=score,
                gate_wins=wins,
                gate_draws=draws,
                gate_losses=losses,
                gate_promoted=int(publish),
                gate_s=time.perf_counter() - gate_started,
            )
            state["gates"].append([state["iteration"], wins, draws, losses, int(publish)])
            text = f"gate +{wins} ={draws} -{losses} (score {score:.2f}) -> {'promoted' if publish else 'kept the best'}"
        else:
            publish = False
        if publish:
            self.promote()
            metrics["best_version"] = state["best_version"]
        return text

    def promote(self) -> None:
        """The network in training becomes the best: published to the collectors (as the
        iteration, or newer than what the server holds: a resumed run), saved as ``best.pt``."""
        import ray

        from chessrl.search.mcts import NetworkEvaluator

        self.best.load_state_dict(self.net.state_dict())
        version = ray.get(self.server.publish.remote(numpy_state(self.best), self.state["iteration"]))
        self.state["best_version"] = version
        save_weights(
            self.phase,
            "best.pt",
            {"model": self.best.state_dict(), "net": asdict(self.cfg.net), "version": version},
        )
        if self.own_play is not None:
            self.own_play.set_evaluator(NetworkEvaluator(self.best), version)

    def save_copy(self) -> None:
        """Rank 0 at a checkpoint: the checkpoint also as ``checkpoints/<run>_stepXXXX.pt``."""
        rel = f"{self.cfg.run}_step{self.state['step']:04d}.pt"
        save_weights(self.phase.child("checkpoints"), rel, self.loop.snapshot())

    def stop(self) -> None:
        """Rank 0 at the end: the collectors stopped (through the parameter server), and the
        network in training saved as ``final.pt``; the replay window's stream ended."""
        import ray

        ray.get(self.server.stop.remote())
        if self.window is not None:
            self.replay.write_text(DONE, "")  # the stream's read task ends
        final = {
            "model": self.net.state_dict(),
            "net": asdict(self.cfg.net),
            "version": self.state["iteration"],
        }
        save_weights(self.phase, "final.pt", final)


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """The learner, in every Ray Train worker: take new games, train on the window, gate, publish
    (``loop_config`` is Ray Train's: a :class:`SelfplayLoopConfig` under ``config``)."""
    cfg = SelfplayLoopConfig.of(loop_config)
    learner = SelfplayLearner(cfg)
    loop, state = learner.loop, learner.state
    metrics: dict[str, Any] = {}  # the last iteration's, also in the final report (a sweep's metric)
    while state["iteration"] < cfg.iterations and not learner.out_of_time():
        generation_started = time.perf_counter()
        got = learner.new_games()
        if got is None:
            break
        wait_s = time.perf_counter() - generation_started
        files = learner.take(got)
        metrics = iteration_metrics(state, got, files, learner.train(files, got["rows"]), wait_s)
        gate_now = state["iteration"] % cfg.checkpoint_interval == 0
        gate_text = learner.gate(metrics, gate_now) if learner.lead else ""
        metrics["elapsed_s"] = loop.tick()
        loop.record(metrics, progress_text(state, metrics, got, gate_text), step=state["step"])
        save = gate_now or state["iteration"] >= cfg.iterations
        if save and learner.lead:
            learner.save_copy()
        loop.maybe_checkpoint(metrics, due=save)
    if learner.lead:
        learner.stop()
    loop.finish({**metrics, **state_metrics(state)}, state_file=None)
