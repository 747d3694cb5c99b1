"""RolloutCollectors: many games at once, the policy's moves for all of them in one forward pass,
rewards from the RewardServer (a step's moves in one call, checked and tokenised by the
collector), finished episodes written as rollout Parquet shards (PPO now; GRPO's group rollouts
reuse the shard layout and the weight pulls).

    spec = RolloutSpec(run="demo", rollout_uri=".../ppo/rollouts", ..., server_name="demo/parameter-server")
    collectors = [RolloutCollector.options(name=f"demo/rollout-collector-{i}").remote(spec, i)
                  for i in range(2)]
    runs = [c.run.remote() for c in collectors]          # until the ParameterServer says stop

A collector is a thin shell around :func:`chessrl.rl.ppo.play_episodes`. Between moves it asks the
ParameterServer for newer weights (each action records the version that chose it). It plays
at most ``rounds_per_version`` rounds of ``concurrent_games`` episodes with one version, then
waits for the learner's next one: that is the backpressure, and it bounds how stale a sample
can be. Each round is one shard, ``shard-<collector>-<n>.parquet``, written whole (a temporary
file renamed): the learner lists the folder, so a shard on storage is never lost, and a shard
half written is never seen. A killed collector is restarted by Ray (``max_restarts``), its
``run`` retried, and it numbers its shards on from what is on storage, so none is written twice;
the round it was playing is lost.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.util import metrics

from actors.collector_status import CollectorStatus
from chessrl.rl.ppo import PPOSettings
from chessrl.rl.ppo_types import SHARD_NAME, list_rollout_shards, rollout_shard_name


@dataclass(frozen=True)
class RolloutSpec:
    """What every collector of a run needs (picklable)."""

    run: str
    rollout_uri: str
    status_uri: str
    policy_path: str
    settings: PPOSettings
    opponents: tuple[str, ...]
    phase_uri: str
    """The phase's folder: its ``starts.json`` lists the move lists the episodes start from
    (sampled by the driver from the games table; on storage, so that the actor's constructor
    arguments stay small)."""
    concurrent_games: int
    max_actions: int
    rounds_per_version: int
    seed: int
    server_name: str
    namespace: str
    reward_servers: tuple[str, ...]
    engine_pool: Any = None
    """An :class:`actors.engine_pool.EnginePool` when an opponent is Stockfish."""
    stockfish_nodes: int = 1000
    invocation: str = ""
    reward: str = "model"
    """model: the reward servers score the moves; stockfish: ``engine_pool`` grades them
    (:func:`chessrl.rl.ppo.scaled_grades` on ``grade_scale`` at ``reward_nodes``, ``max_loss``,
    ``dead_zone``)."""
    reward_nodes: int = 2000
    max_loss: float = 0.5
    dead_zone: float = 0.0
    grade_scale: str = "expected"
    table_share: float = 0.0
    """Share of a round's episodes that are one move at a position of ``table.json`` (whole
    training games in the phase's folder; any ply), the rest the policy's own games."""


class _Stopped(Exception):
    """The ParameterServer said stop while a round was being played."""


@ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)
class RolloutCollector(CollectorStatus):
    """``concurrent_games`` episodes at once; each finished round is one rollout shard."""

    def __init__(self, spec: RolloutSpec, index: int) -> None:
        from cluster.storage import Storage

        self.spec, self.index = spec, index
        self.rollouts = Storage.from_uri(spec.rollout_uri)
        self.status = Storage.from_uri(spec.status_uri)
        mine = [rel for rel in list_rollout_shards(self.rollouts) if rel.startswith(f"shard-{index:02d}-")]
        self.next_shard = 1 + max((int(SHARD_NAME.match(rel).group(2)) for rel in mine), default=-1)  # type: ignore[union-attr]
        previous = self._read_status()
        same = previous.get("invocation") == spec.invocation
        self.starts = int(previous.get("starts", 0)) + 1 if same else 1
        self.lifetime_starts = int(previous.get("lifetime_starts", 0)) + 1
        self._write_status(state="starting")
        tags = {"collector": f"{spec.run}/rollout-collector-{index}"}
        self._episodes = metrics.Counter(
            "chessrl_rollout_episodes", "Episodes written", tag_keys=("collector",)
        )
        self._actions = metrics.Counter(
            "chessrl_rollout_actions", "Policy actions written", tag_keys=("collector",)
        )
        self._legal = metrics.Gauge(
            "chessrl_rollout_legal_rate", "Legal share of the last shard", tag_keys=("collector",)
        )
        for metric in (self._episodes, self._actions, self._legal):
            metric.set_default_tags(tags)

    @staticmethod
    def _split(spent: dict[str, float]) -> dict[str, float]:
        """Cumulative seconds by kind; ``sample``: the rounds less scoring, opponents and weight pulls."""
        sample = spent["round"] - spent["score"] - spent["opponents"] - spent["weights"]
        out = {"sample": sample, **{k: v for k, v in spent.items() if k != "round"}}
        return {k: round(v, 3) for k, v in out.items()}

    def pid(self) -> int:
        return os.getpid()

    def run(self, max_rounds: int | None = None) -> dict[str, Any]:
        """Play rounds until the server says stop (or ``max_rounds`` were written); returns
        counts. An exception is reported to the server first, so the learner does not wait."""
        try:
            return self._run(max_rounds)
        except Exception as exc:
            server = ray.get_actor(self.spec.server_name, namespace=self.spec.namespace)
            ray.get(
                server.report_failure.remote(f"rollout collector {self.index}: {type(exc).__name__}: {exc}")
            )
            raise

    def _opponents(self, policy: Any, tokenizer: Any, moves_table: Any, generator: Any) -> list[Any]:
        from chessrl.rl.ppo import parse_opponent, policy_opponent, random_opponent

        out = []
        for k, text in enumerate(self.spec.opponents):
            spec = parse_opponent(text)
            seed = self.spec.seed * 7919 + self.index * 101 + self.lifetime_starts * 13 + k
            if spec.kind == "random":
                out.append(random_opponent(seed))
            elif spec.kind == "self":
                out.append(
                    policy_opponent(
                        policy,
                        tokenizer,
                        moves_table,
                        self.spec.settings.temperature,
                        generator,
                        self.spec.settings.text_format,
                    )
                )
            else:
                out.append(self._stockfish(spec.player, seed))
        return out

    def _stockfish(self, player: Any, seed: int) -> Any:
        pool = self.spec.engine_pool
        strength, limit = player.strength(), player.search_limit(self.spec.stockfish_nodes)
        share = (player.random_share or 0) / 100
        rng = random.Random(seed)

        def choose(boards: Any) -> Any:
            import chess

            moves = pool.play_many([b.fen() for b in boards], limit, strength=strength)
            out = []
            for board, uci in zip(boards, moves, strict=True):
                if share and rng.random() < share:
                    out.append(rng.choice(list(board.legal_moves)))
                else:
                    out.append(chess.Move.from_uci(uci))
            return out

        return choose

    def _run(self, max_rounds: int | None) -> dict[str, Any]:
        """Rounds with the latest weights until the server says stop: see :meth:`run`."""
        import torch

        spec = self.spec
        torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
        server = ray.get_actor(spec.server_name, namespace=spec.namespace)
        play = self._setup(server)
        weights, spent = play.weights, play.spent
        rounds = episodes = actions_written = 0
        self._write_status(state="running")
        started = time.perf_counter()
        while max_rounds is None or rounds < max_rounds:
            stopped, newer = ray.get(server.poll.remote(weights.version))
            if stopped:
                break
            if newer is not None:
                weights.load(newer)
            if weights.version < 0 or weights.rounds_at_version >= spec.rounds_per_version:
                time.sleep(0.05)  # nothing published yet, or this version's share is played
                spent["idle"] += 0.05
                continue
            started_with = weights.version
            try:
                n_starts, n_actions = self._round(play)
            except _Stopped:
                break
            rounds += 1
            weights.count_round(started_with)
            episodes += n_starts
            actions_written += n_actions
        self._write_status(state="stopped", seconds=self._split(spent))
        return {
            "collector": self.index,
            "rounds": rounds,
            "episodes": episodes,
            "actions": actions_written,
            "seconds": time.perf_counter() - started,
            "starts": self.starts,
        }

    def _setup(self, server: Any) -> _Rounds:
        """The policy (loaded through :func:`chessrl.arena.saved_models.load_saved_model`), its
        opponents, the reward client and the start positions, each timed into ``spent``."""
        import torch

        from actors.reward_server import RewardClient
        from chessrl.arena.saved_models import load_saved_model
        from chessrl.engine.client import SearchLimit
        from chessrl.lm.legality import MoveTokens
        from chessrl.rl.ppo import scaled_grades
        from chessrl.rl.reward import RewardQuery
        from cluster.storage import Storage

        spec = self.spec
        # a step's moves checked and tokenised here (this collector's CPU, its games cached), so the
        # shared server does only forward passes
        reward = (
            RewardClient(
                [ray.get_actor(n, namespace=spec.namespace) for n in spec.reward_servers], prepare_here=True
            )
            if spec.reward == "model"
            else None
        )
        policy, tokenizer = load_saved_model(spec.policy_path, "policy")
        policy.eval()
        moves_table = MoveTokens(tokenizer)
        seed = spec.seed * 1000 + self.index * 100 + self.lifetime_starts  # a restart plays new games
        generator = torch.Generator().manual_seed(seed)
        opponents = self._opponents(policy, tokenizer, moves_table, generator)
        starts = json.loads(Storage.from_uri(spec.phase_uri).read_text("starts.json"))
        # where this collector's time goes (seconds, cumulative; in its status file and the bench's table)
        spent = dict.fromkeys(("round", "score", "opponents", "weights", "write", "idle"), 0.0)
        weights = _Weights(policy, server)

        def score(queries: list[tuple[list[str], str]]) -> list[float]:
            if reward is None:  # Stockfish grades each move, on the value scale asked
                return scaled_grades(queries, engine_scores, spec.grade_scale, spec.max_loss, spec.dead_zone)  # type: ignore[arg-type]
            return reward.score_batch([RewardQuery(tuple(moves), move) for moves, move in queries])

        def engine_scores(fens: list[str]) -> list[Any]:
            limit = SearchLimit(nodes=spec.reward_nodes)
            return [a.score for a in spec.engine_pool.analyse(fens, limit)]

        return _Rounds(
            policy,
            tokenizer,
            moves_table,
            [_timed(spent, "opponents", o) for o in opponents],
            generator,
            _timed(spent, "score", score),
            _timed(spent, "weights", weights.refresh),
            weights,
            spent,
            [{"moves": " ".join(m)} for m in starts],
            seed,
            [
                {"moves": " ".join(m)}
                for m in json.loads(Storage.from_uri(spec.phase_uri).read_text("table.json"))
            ]
            if spec.table_share > 0
            else [],
        )

    def _round(self, play: _Rounds) -> tuple[int, int]:
        """One round of ``concurrent_games`` episodes with the current weights, written as the
        next shard; returns the episodes and actions written."""
        from chessrl.rl.ppo import play_episodes, rollout_table, start_positions
        from chessrl.search.replay import write_shard

        spec, spent, n = self.spec, play.spent, self.next_shard
        table = table_count(spec.concurrent_games, spec.table_share, n) if play.table_games else 0
        starts = start_positions(
            play.start_games,
            spec.concurrent_games - table,
            seed=play.seed * 100_003 + n,
            max_ply=10**6,
            prefix=f"c{self.index}-{n:06d}",
        ) + start_positions(  # one graded move at a position anywhere in a training game
            play.table_games,
            table,
            seed=play.seed * 100_019 + n,
            max_ply=10**6,
            prefix=f"c{self.index}-{n:06d}t",
        )
        began = time.perf_counter()
        actions = play_episodes(
            play.policy,
            play.tokenizer,
            play.moves_table,
            starts,
            play.opponents,
            spec.settings,
            [spec.max_actions] * (len(starts) - table) + [1] * table,
            play.weights.version,
            play.generator,
            play.score,
            refresh=play.refresh,
        )
        spent["round"] += time.perf_counter() - began
        began = time.perf_counter()
        table = rollout_table(actions)
        write_shard(self.rollouts, rollout_shard_name(self.index, n), table)
        spent["write"] += time.perf_counter() - began
        self.next_shard += 1
        self._episodes.inc(len(starts))
        self._actions.inc(table.num_rows)
        self._legal.set(sum(a.legal for a in actions) / max(1, len(actions)))
        self._write_status(
            state="running", last_shard=rollout_shard_name(self.index, n), seconds=self._split(spent)
        )
        return len(starts), table.num_rows


def table_count(games: int, share: float, round_index: int) -> int:
    """How many of round ``round_index``'s ``games`` episodes are table positions: the share
    carried over from round to round, so it holds over the run even where ``games x share`` is
    not whole (0.1 of 4 games: one table position every 2.5 rounds).

    >>> [table_count(4, 0.1, n) for n in range(5)], sum(table_count(80, 0.8, n) for n in range(10))
    ([0, 0, 1, 0, 1], 640)
    """
    return math.floor((round_index + 1) * games * share + 1e-9) - math.floor(
        round_index * games * share + 1e-9
    )


class _Weights:
    """The policy's weights as the ParameterServer publishes them: the version in use and the
    rounds played with it (at most ``rounds_per_version``: the backpressure).

    A round counts toward its version only when that version played all of it: newer weights
    loaded between moves leave the round's earlier actions older than the learner's version (at
    ``max_staleness 0`` it drops them), so the new version's allowance starts after that round.

    >>> w = _Weights(policy=None, server=None)
    >>> w.version = 3; w.count_round(started_with=3); w.rounds_at_version
    1
    >>> w.version, w.rounds_at_version = 4, 0  # newer weights loaded mid-round
    >>> w.count_round(started_with=3); w.rounds_at_version
    0
    """

    def __init__(self, policy: Any, server: Any) -> None:
        self.policy, self.server = policy, server
        self.version, self.rounds_at_version = -1, 0

    def load(self, newer: Any) -> None:
        """Load ``(version, [ref])`` from a poll into the policy."""
        import torch

        version, [ref] = newer
        self.policy.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ray.get(ref).items()})
        self.policy.eval()
        if version != self.version:
            self.rounds_at_version = 0
        self.version = version

    def count_round(self, started_with: int) -> None:
        """A round that began with version ``started_with`` is played."""
        if self.version == started_with:
            self.rounds_at_version += 1

    def refresh(self) -> tuple[Any, int] | None:
        """Between moves: ``(policy, version)`` after loading newer weights, else None; raises
        :class:`_Stopped` when the server says stop."""
        stopped, newer = ray.get(self.server.poll.remote(self.version))
        if stopped:
            raise _Stopped
        if newer is None:
            return None
        self.load(newer)
        return self.policy, self.version


@dataclass
class _Rounds:
    """What a collector's rounds play with: the policy and its move table, the (timed)
    opponents, reward and weight refresh, the games the episodes start from, the seed and the
    games whose positions are one-move episodes."""

    policy: Any
    tokenizer: Any
    moves_table: Any
    opponents: list[Any]
    generator: Any
    score: Callable[[list[tuple[list[str], str]]], list[float]]
    refresh: Callable[[], tuple[Any, int] | None]
    weights: _Weights
    spent: dict[str, float]
    start_games: list[dict[str, str]]
    seed: int
    table_games: list[dict[str, str]]
    """Whole training games whose positions are one-move episodes (``table_share``)."""


def _timed(spent: dict[str, float], key: str, fn: Any) -> Any:
    """``fn``, its seconds added to ``spent[key]``."""

    def call(*args: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args)
        finally:
            spent[key] += time.perf_counter() - began

    return call
