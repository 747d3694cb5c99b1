"""``annotate``'s position sources: where each shard's positions come from before the engines
annotate them. :class:`ShardPlan` (one shard to write) and :class:`AnnotateInputs` (the games
table and the policy the sources read, as ``check_annotate`` found them);
:class:`PositionSource` (the games, held-out, random, lopsided and engine sources, seeded by the
shard, and the whole-games mode); the policy source's games (:func:`policy_game_positions`, a Ray
task) and :class:`PolicyTasks`, which keeps ``policy_workers`` of them running ahead of the
engines. :mod:`pipelines.annotate` plans the shards and annotates what these give.

    source = PositionSource(cfg, AnnotateInputs(games_storage, None), heldout_fraction=0.1, seed=0)
    plan = ShardPlan("train/random-00000.parquet", "random", 0, 100)
    positions = source.local(plan, "train")   # 100 dicts: fen, game_id, ply, phase, history
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from chessrl.data.positions import (
    PositionSampler,
    lopsided_game_moves,
    lopsided_game_positions,
    phase_of,
    random_game_moves,
    random_game_positions,
)
from chessrl.engine.engine_games import Analyse, random_opponent_positions
from chessrl.lm.lm_data import split_games
from chessrl.rl.preferences import board_key
from cluster.errors import StorageError
from cluster.storage import Storage
from pipelines.common.artifacts import read_games
from pipelines.config import AnnotateConfig

#: Live games per policy task (one batched forward pass a ply for all of them).
POLICY_LIVE_GAMES = 32


@dataclass(frozen=True)
class ShardPlan:
    """One shard to write: its file, source, number (its seed) and position count."""

    name: str
    source: str
    index: int
    count: int


@dataclass(frozen=True)
class AnnotateInputs:
    """What ``annotate`` reads: the games table (when a source or the held-out set needs it) and
    the policy (for the ``policy`` source)."""

    games: Storage | None
    policy: str | None


class PositionSource:
    """Every source's positions for a shard, seeded by the shard: the training and held-out games
    indexed once, random games made here, the policy's games in Ray tasks (started ahead)."""

    def __init__(
        self, cfg: AnnotateConfig, found: AnnotateInputs, heldout_fraction: float, seed: int
    ) -> None:
        self.cfg, self.found, self.seed = cfg, found, seed
        train_rows: list[dict[str, Any]] = []
        held_rows: list[dict[str, Any]] = []
        if found.games is not None:
            train_rows, held_rows, _ = split_games(read_games(found.games), heldout_fraction)
        self.train_games = train_rows
        # each split's games replayed once; every shard draws from them with its own seed
        self.samplers = {
            split: PositionSampler(rows, seed=seed)
            for split, rows in (("games", train_rows), ("heldout", held_rows))
            if rows
        }
        self.rows = {"games": train_rows, "heldout": held_rows}
        self.analyse: Analyse | None = None  # the engine source's Stockfish (set once the pool starts)

    def starts(self, index: int, n: int) -> list[tuple[str, ...]]:
        """Start positions for the policy's games: training games' positions (the start position
        without games)."""
        if "games" not in self.samplers:
            return [()]
        return [p.history for p in self.samplers["games"].sample(n, seed=self.seed * 1009 + index)]

    def local(self, plan: ShardPlan, split: str, exclude: set[str] = frozenset()) -> list[dict[str, Any]]:  # type: ignore[assignment]
        """A games or random shard's positions: ``fen``, ``game_id``, ``ply``, ``phase``. With
        ``exclude`` (board keys: a held-out shard gets the training shards' boards), distinct
        positions none of which is excluded (the start position and common openings are in
        training and held-out games alike), as many as four draws find."""
        seed = self.seed * 7919 + plan.index + (500_009 if split == "heldout" else 0)
        if self.cfg.whole_games and split == "train":
            return self.whole_games(plan, seed)
        if plan.source in ("random", "lopsided", "engine"):
            made = {
                "random": random_game_positions,
                "lopsided": lopsided_game_positions,
                "engine": partial(random_opponent_positions, analyse=self.analyse),
            }[plan.source]
            picks = made(plan.count, seed=seed, max_plies=self.cfg.max_plies)
            return [
                {
                    "fen": p.fen,
                    "game_id": f"{plan.source}-{plan.index}-{p.game}",
                    "ply": len(p.history),
                    "phase": p.phase,
                    "history": " ".join(p.history),
                }
                for p in picks
            ]
        name = "heldout" if split == "heldout" else "games"
        rows = self.rows[name]
        if name not in self.samplers:
            raise StorageError(
                f"{self.found.games.uri if self.found.games else 'the games table'} has no "
                f"{'held-out' if split == 'heldout' else 'training'} games to draw positions from"
            )
        picks = self.samplers[name].sample(plan.count, seed=seed)
        if exclude:
            kept: dict[str, Any] = {}
            for attempt in range(4):
                for pick in (
                    picks if attempt == 0 else self.samplers[name].sample(plan.count, seed=seed + attempt)
                ):
                    key = board_key(pick.fen)
                    if key not in exclude and key not in kept and len(kept) < plan.count:
                        kept[key] = pick
            picks = list(kept.values())
        return [
            {
                "fen": p.fen,
                "game_id": str(rows[p.game].get("game_id")),
                "ply": len(p.history),
                "phase": p.phase,
                "history": " ".join(p.history),
            }
            for p in picks
        ]

    def whole_games(self, plan: ShardPlan, seed: int) -> list[dict[str, Any]]:
        """``plan.count`` positions, every ply of one game after another (up to ``max_plies``; a
        shard's last game may stop early): training games drawn with ``seed``, or random-mover
        (or lopsided) games made with it. Each game is one sequence of soft targets for sft in the moves format."""
        import random

        import chess

        rng = random.Random(seed)
        out: list[dict[str, Any]] = []
        game = 0
        while len(out) < plan.count:
            if plan.source in ("random", "lopsided"):
                play = random_game_moves if plan.source == "random" else lopsided_game_moves
                moves = play(rng, self.cfg.max_plies)
                game_id = f"{plan.source}-{plan.index}-{game}"
            else:
                if not self.train_games:
                    raise StorageError("the games table has no training games to annotate whole")
                row = self.train_games[rng.randrange(len(self.train_games))]
                moves, game_id = (
                    str(row.get("moves") or "").split()[: self.cfg.max_plies],
                    str(row.get("game_id")),
                )
            board = chess.Board()
            for ply in range(len(moves) + 1):
                if len(out) >= plan.count or board.is_game_over():
                    break
                out.append(
                    {
                        "fen": board.fen(),
                        "game_id": game_id,
                        "ply": ply,
                        "phase": phase_of(board, ply),
                        "history": " ".join(moves[:ply]),
                    }
                )
                if ply < len(moves):
                    board.push_uci(moves[ply])
            game += 1
        return out


def policy_game_positions(
    policy: str,
    starts: list[tuple[str, ...]],
    n: int,
    opponents: list[str],
    temperature: float,
    max_plies: int,
    seed: int,
) -> list[dict[str, Any]]:
    """``n`` positions (the policy to move) of games the policy plays, masked, against each of
    ``opponents`` in turn (``start`` is its own masked argmax), continued from ``starts``. Runs
    in a Ray task."""
    import chess
    import torch

    from chessrl.arena.saved_models import load_saved_model
    from chessrl.lm.checkpoints import checkpoint_config
    from chessrl.rl.own_games import OwnGames

    torch.manual_seed(seed)
    model, tokenizer = load_saved_model(policy, "policy")
    text_format = checkpoint_config(policy).get("chessrl_text_format") or "moves"
    per = [n // len(opponents) + (1 if i < n % len(opponents) else 0) for i in range(len(opponents))]
    out: list[dict[str, Any]] = []
    for k, (opponent, count) in enumerate(zip(opponents, per, strict=True)):
        games = OwnGames(
            starts,
            live=min(POLICY_LIVE_GAMES, max(1, count)),
            text_format=text_format,
            max_plies=max_plies,
            opponent=opponent,
            seed=seed * 31 + k,
        )
        got = 0
        while got < count:
            for prompt, history in zip(
                games.prompts(model, tokenizer, temperature, start=model), games.games, strict=True
            ):
                if got >= count:
                    break
                board = chess.Board(prompt.fen)
                if not any(True for _ in board.legal_moves):
                    continue
                ply = len(history)
                out.append(
                    {
                        "fen": prompt.fen,
                        "game_id": f"policy-{opponent}-{seed}",
                        "ply": ply,
                        "phase": phase_of(board, ply),
                        "history": " ".join(history),
                    }
                )
                got += 1
    return out


class PolicyTasks:
    """The policy source's pending shards as Ray tasks, ``policy_workers`` of them ahead of the
    engines (each takes one CPU from them), the first ones started before any engine work."""

    def __init__(
        self,
        cfg: AnnotateConfig,
        found: AnnotateInputs,
        source: PositionSource,
        pending: list[ShardPlan],
        seed: int,
    ) -> None:
        import ray

        self.cfg, self.found, self.source, self.seed = cfg, found, source, seed
        self.order = [p for p in pending if p.source == "policy" and p.name.startswith("train/")]
        self.task = ray.remote(num_cpus=1, max_retries=1)(policy_game_positions)
        self.refs: dict[str, Any] = {}
        self._top_up()

    def _top_up(self) -> None:
        while len(self.refs) < self.cfg.policy_workers and self.order:
            plan = self.order.pop(0)
            self.refs[plan.name] = self.task.remote(
                self.found.policy,
                self.source.starts(plan.index, 64),
                plan.count,
                list(self.cfg.policy_opponents),
                self.cfg.policy_temperature,
                self.cfg.max_plies,
                self.seed * 1_000_003 + plan.index,
            )

    def positions(self, plan: ShardPlan) -> list[dict[str, Any]]:
        """The shard's positions (waits for its task), the next task started in its place."""
        import ray

        positions: list[dict[str, Any]] = ray.get(self.refs.pop(plan.name))
        self._top_up()
        return positions
