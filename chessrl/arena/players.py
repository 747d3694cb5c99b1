"""Players for arenas: one protocol, and a player for a language model, Stockfish, a random mover
and any external UCI engine. Ray-free; the evaluate phase builds them inside its game tasks, the
models they play loaded through :func:`chessrl.arena.saved_models.load_saved_model`.

>>> player = RandomPlayer()
>>> player.new_game(seed=3)
>>> choice = player.move(chess.Board())
>>> chess.Move.from_uci(choice.move) in chess.Board().legal_moves
True

A player is named by a spec string in configs and on the command line:

>>> parse_player_spec("stockfish:elo=1500,nodes=2000")
PlayerSpec(kind='stockfish', path=None, skill_level=None, elo=1500, nodes=2000, movetime_ms=None, simulations=None, random_share=None, search=None, masked=False)
>>> parse_player_spec("random").label
'random'

``random``; ``sft`` (this run's sft model); ``lm:DIR|s3://...``; either with ``,masked`` (the
model's most probable *legal* move: its logits restricted to the legal moves, the first-attempt
legal rate of its unmasked argmax still counted); ``judge:DIR|s3://...`` (a reward model playing
the legal move it scores highest: :class:`chessrl.rl.judge_player.JudgePlayer`); ``mcts[:FILE.pt][,sims=N][,search=gumbel]``
(a self-play network searched by MCTS, PUCT unless ``search=gumbel``; bare ``mcts`` is this run's
best);
``stockfish[:skill=N|elo=N][,nodes=N][,random=P]`` (``random=P``: a uniformly random legal move
P% of the time, the rungs of the low Elo ladder); ``uci:/path/to/engine[,nodes=N|movetime_ms=N]``.

>>> parse_player_spec("stockfish:elo=1350,nodes=1000,random=45").label
'stockfish:elo=1350,nodes=1000,random=45'

>>> parse_player_spec("lm:runs/a/grpo/model,masked").label
'lm:runs/a/grpo/model,masked'
>>> parse_player_spec("judge:runs/a/reward/model").label
'judge:runs/a/reward/model'
>>> parse_player_spec("mcts:runs/a/selfplay/best.pt,sims=64").label
'mcts:runs/a/selfplay/best.pt,sims=64'
>>> parse_player_spec("mcts,sims=100").label
'mcts,sims=100'
>>> parse_player_spec("mcts:best.pt,sims=16,search=gumbel").label
'mcts:best.pt,sims=16,search=gumbel'
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import chess

from chessrl.engine.client import SearchLimit, Strength
from chessrl.lm.formats import MoveCounts, get_format
from cluster.errors import ConfigError

PlayerKind = Literal["random", "sft", "lm", "judge", "mcts", "stockfish", "uci"]
IllegalPolicy = Literal["fallback", "forfeit"]


@dataclass(frozen=True)
class MoveChoice:
    """A player's answer: the move (``None`` = forfeit), and what it took to get there."""

    move: str | None
    illegal_attempts: int = 0
    first_attempt_legal: bool = True
    fallback: bool = False
    comment: str = ""


class Player(Protocol):
    """What an arena needs from a player."""

    name: str

    def new_game(self, seed: int) -> None:
        """Reset per-game state; ``seed`` makes any sampling reproducible."""

    def move(self, board: chess.Board) -> MoveChoice:
        """The move to play in ``board`` (its move stack is the game so far)."""

    def close(self) -> None:
        """Release engines and processes."""


class MoveEngine(Protocol):
    """An engine that plays at a given strength: ``actors.engine_pool.EnginePool`` is one."""

    def play(
        self, position: str, limit: SearchLimit, *, strength: Strength | None = None, fresh: bool = False
    ) -> str: ...


# ---------------------------------------------------------------------------------------------
# specs


@dataclass(frozen=True)
class PlayerSpec:
    """A parsed player spec (see the module docstring)."""

    kind: PlayerKind
    path: str | None = None
    skill_level: int | None = None
    elo: int | None = None
    nodes: int | None = None
    movetime_ms: int | None = None
    simulations: int | None = None
    random_share: int | None = None
    search: str | None = None  # an mcts player's root search: "puct" (None) or "gumbel"
    masked: bool = False  # a language model playing its best legal move (sft / lm only)

    @property
    def label(self) -> str:
        """A short, unique, readable name (PGN player name, report rows)."""
        masked = ",masked" if self.masked else ""
        if self.kind in ("random", "sft"):
            return self.kind + masked
        if self.kind in ("lm", "judge"):
            return f"{self.kind}:{self.path}{masked}"
        if self.kind == "mcts":
            options = [f"sims={self.simulations}"] if self.simulations else []
            options += [f"search={self.search}"] if self.search else []
            if self.path:
                return "mcts:" + ",".join([self.path, *options])
            return ",".join(["mcts", *options])
        extra = [f"nodes={self.nodes}"] if self.nodes else []
        extra += [f"movetime_ms={self.movetime_ms}"] if self.movetime_ms else []
        extra += [f"random={self.random_share}"] if self.random_share is not None else []
        if self.kind == "stockfish":
            level = [f"elo={self.elo}"] if self.elo is not None else []
            level += [f"skill={self.skill_level}"] if self.skill_level is not None else []
            return ":".join(["stockfish", ",".join([*level, *extra])]).rstrip(":")
        return "uci:" + ",".join([str(self.path), *extra])

    @property
    def anchor_elo(self) -> float | None:
        """The rating this player is anchored to (Stockfish at a UCI_Elo level, no handicap), if any."""
        handicapped = bool(self.random_share)  # a random move now and then: weaker than its UCI_Elo
        return (
            float(self.elo) if self.kind == "stockfish" and self.elo is not None and not handicapped else None
        )

    def search_limit(self, default_nodes: int) -> SearchLimit:
        if self.movetime_ms:
            return SearchLimit(time=self.movetime_ms / 1000)
        return SearchLimit(nodes=self.nodes or default_nodes)

    def strength(self) -> Strength:
        if self.elo is not None:
            return Strength(elo=self.elo)
        return Strength(skill_level=self.skill_level if self.skill_level is not None else 20)


_ALLOWED = (
    "random, sft[,masked], lm:DIR[,masked], judge:DIR, mcts[:FILE.pt][,sims=N][,search=puct|gumbel], stockfish[:skill=N|elo=N][,nodes=N|movetime_ms=N][,random=P], "
    "uci:PATH[,nodes=N|movetime_ms=N]"
)


def parse_player_spec(spec: str, *, key: str = "evaluate.players") -> PlayerSpec:
    """Parse one spec; a bad one is a :class:`ConfigError` naming ``key`` and what is allowed."""
    text = spec.strip()
    if text.endswith(",masked"):
        inner = parse_player_spec(text[: -len(",masked")], key=key)
        if inner.kind not in ("sft", "lm") or inner.masked:
            raise ConfigError(
                f"{key}: player {spec!r}: ',masked' applies to language models (sft, lm:DIR); allowed: {_ALLOWED}"
            )
        return PlayerSpec(kind=inner.kind, path=inner.path, masked=True)
    kind, _, rest = text.partition(":")
    if kind in ("random", "sft") and not rest:
        return PlayerSpec(kind=kind)  # type: ignore[arg-type]
    if kind in ("lm", "judge") and rest:
        return PlayerSpec(kind=kind, path=rest)  # type: ignore[arg-type]
    if kind == "mcts" or text.startswith("mcts,"):
        return _parse_mcts(spec, text[len("mcts") :].lstrip(":"), key)
    if kind not in ("stockfish", "uci") or (kind == "uci" and not rest):
        raise ConfigError(f"{key}: cannot read player {spec!r}; allowed: {_ALLOWED}")
    parts = [p.strip() for p in rest.split(",") if p.strip()] if rest else []
    path = None
    if kind == "uci":
        path, parts = parts[0], parts[1:]
    values: dict[str, int] = {}
    for part in parts:
        name, eq, value = part.partition("=")
        name = {"skill": "skill_level", "skill_level": "skill_level", "random": "random_share"}.get(
            name, name
        )
        if (
            not eq
            or name not in ("skill_level", "elo", "nodes", "movetime_ms", "random_share")
            or not value.lstrip("-").isdigit()
        ):
            raise ConfigError(f"{key}: cannot read {part!r} in player {spec!r}; allowed: {_ALLOWED}")
        values[name] = int(value)
    if kind == "uci" and ({"skill_level", "elo", "random_share"} & values.keys()):
        raise ConfigError(
            f"{key}: player {spec!r}: skill/elo/random apply to stockfish only; allowed: {_ALLOWED}"
        )
    if not 0 <= values.get("random_share", 0) <= 100:
        raise ConfigError(f"{key}: player {spec!r}: random=P is a percentage, 0..100; allowed: {_ALLOWED}")
    try:
        Strength(skill_level=values.get("skill_level"), elo=values.get("elo"))
    except ValueError as exc:
        raise ConfigError(f"{key}: player {spec!r}: {exc}; allowed: {_ALLOWED}") from None
    if any(values.get(k, 1) < 1 for k in ("nodes", "movetime_ms")):
        raise ConfigError(
            f"{key}: player {spec!r}: nodes and movetime_ms must be at least 1; allowed: {_ALLOWED}"
        )
    return PlayerSpec(kind=kind, path=path, **values)  # type: ignore[arg-type]


def _parse_mcts(spec: str, rest: str, key: str) -> PlayerSpec:
    """``mcts`` (this run's self-play network), ``mcts:FILE.pt``, either with ``,sims=N`` and
    ``,search=puct|gumbel``."""
    parts = [p.strip() for p in rest.split(",")]
    path = parts[0] or None
    if path is not None and "=" in path:
        raise ConfigError(
            f"{key}: player {spec!r}: write mcts,sims=N or mcts:FILE.pt,sims=N; allowed: {_ALLOWED}"
        )
    sims = None
    search = None
    for part in parts[1:]:
        name, eq, value = part.partition("=")
        if name == "search" and value in ("puct", "gumbel"):
            search = None if value == "puct" else value
            continue
        if name not in ("sims", "simulations") or not eq or not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{key}: cannot read {part!r} in player {spec!r}; allowed: {_ALLOWED}")
        sims = int(value)
    return PlayerSpec(kind="mcts", path=path, simulations=sims, search=search)


# ---------------------------------------------------------------------------------------------
# players


class MCTSPlayer:
    """A policy/value network searched by MCTS (no root noise; a mate in one, else the most
    visited move, or with ``search="gumbel"`` the move sequential halving kept). The search sees the game's move stack, so the history planes are filled.

    >>> from chessrl.search.network import NetConfig, PolicyValueNet
    >>> player = MCTSPlayer(PolicyValueNet(NetConfig(blocks=0, channels=8, history=1)), simulations=8)
    >>> chess.Move.from_uci(player.move(chess.Board()).move) in chess.Board().legal_moves
    True
    """

    def __init__(
        self, net: Any, simulations: int = 32, name: str = "mcts", c_puct: float = 1.5, search: str = "puct"
    ) -> None:
        from chessrl.search.mcts import BatchedMCTS, MCTSConfig, NetworkEvaluator

        self.name = name
        self.search = BatchedMCTS(
            NetworkEvaluator(net.eval()),
            MCTSConfig(simulations=simulations, c_puct=c_puct, search=search),  # type: ignore[arg-type]
        )

    def new_game(self, seed: int) -> None:
        pass

    def move(self, board: chess.Board) -> MoveChoice:
        from chessrl.search.mcts import Node, terminal_value

        if terminal_value(board) is not None:  # over, or drawn by a repetition or fifty-move claim
            return MoveChoice(None)
        root = Node(board.copy())
        self.search.search([root], add_noise=False)
        return MoveChoice(root.best_move().uci())

    def close(self) -> None:
        pass


class RandomPlayer:
    """A uniformly random legal move (seeded per game)."""

    def __init__(self, name: str = "random") -> None:
        self.name = name
        self.rng = random.Random(0)

    def new_game(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def move(self, board: chess.Board) -> MoveChoice:
        legal = sorted(m.uci() for m in board.legal_moves)
        return MoveChoice(self.rng.choice(legal) if legal else None)

    def close(self) -> None:
        pass


@dataclass
class LMPlayer:
    """A language model's move, asked in ``text_format`` (the one it was trained on): greedy (or
    sampled at ``temperature``), then up to ``retries`` samples at temperature >= 1; then a
    random legal move (``fallback``) or a forfeit. Every illegal or unparseable attempt is
    counted, nothing is masked.

    The moves format reads the game from the start position: from a FEN the model sees only the
    moves played since. The rookworld format asks ``P: <FEN> M:`` and sees only the position.

    ``masked``: the most probable legal move (or one drawn from the legal moves at
    ``temperature``), never illegal, and never one that hands the opponent a draw claim
    (repetition, fifty moves) while it has another; ``first_attempt_legal`` still says whether
    the unmasked argmax was legal, so the games report the model's own legality beside its play.
    """

    model: Any
    tokenizer: Any
    name: str = "lm"
    temperature: float = 0.0
    retries: int = 3
    on_illegal: IllegalPolicy = "fallback"
    counts: MoveCounts = field(default_factory=MoveCounts)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    text_format: str = "moves"
    masked: bool = False

    def new_game(self, seed: int) -> None:
        self.rng = random.Random(seed)
        import torch

        torch.manual_seed(seed)

    def move(self, board: chess.Board) -> MoveChoice:
        from chessrl.lm.models import lm_move

        if self.masked:
            from chessrl.lm.masked import masked_move

            choice = masked_move(
                self.model,
                self.tokenizer,
                board,
                [m.uci() for m in board.move_stack],
                get_format(self.text_format),
                temperature=self.temperature,
                rng=self.rng,
                avoid_draw_claims=True,
            )
            return MoveChoice(choice.moves[0], first_attempt_legal=choice.unmasked_legal)

        before = self.counts.total
        move, fell_back = lm_move(
            self.model,
            self.tokenizer,
            board,
            [m.uci() for m in board.move_stack],
            fmt=get_format(self.text_format),
            temperature=self.temperature,
            retries=self.retries,
            counts=self.counts,
            rng=self.rng,
        )
        illegal = self.counts.total - before - (0 if fell_back else 1)
        if not fell_back:
            return MoveChoice(move, illegal_attempts=illegal, first_attempt_legal=illegal == 0)
        note = f"{illegal} illegal attempts"
        if self.on_illegal == "forfeit":
            return MoveChoice(None, illegal, False, comment=f"{note}: forfeit")
        return MoveChoice(move, illegal, False, fallback=True, comment=f"{note}: random fallback")

    def close(self) -> None:
        pass


class StockfishPlayer:
    """Stockfish at a Skill Level or a ``UCI_Elo`` through a :class:`MoveEngine` (the pool);
    with ``random_share`` > 0, a uniformly random legal move that share of the time (seeded per
    game): a graded handicap that places rungs below the weakest level Stockfish offers."""

    def __init__(
        self,
        engine: MoveEngine,
        strength: Strength,
        limit: SearchLimit,
        name: str = "stockfish",
        random_share: float = 0.0,
    ) -> None:
        self.engine, self.strength, self.limit, self.name = engine, strength, limit, name
        self.random_share = random_share
        self.rng = random.Random(0)

    def new_game(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def move(self, board: chess.Board) -> MoveChoice:
        if self.random_share > 0 and self.rng.random() < self.random_share:
            return MoveChoice(self.rng.choice(sorted(m.uci() for m in board.legal_moves)))
        return MoveChoice(self.engine.play(board.fen(), self.limit, strength=self.strength, fresh=False))

    def close(self) -> None:
        pass


class UCIPlayer:
    """Any external UCI engine by path, through python-chess's own client."""

    def __init__(self, path: str, limit: SearchLimit, name: str | None = None) -> None:
        import chess.engine

        from chessrl.engine.client import EngineError

        try:
            self.engine = chess.engine.SimpleEngine.popen_uci(path, timeout=30)
        except (OSError, chess.engine.EngineError) as exc:
            raise EngineError(f"cannot start the UCI engine {path}: {exc}") from None
        self.limit = limit.to_chess()  # nodes, depth and/or time (a depth alone used to search forever)
        self.name = name or f"uci:{path}"

    def new_game(self, seed: int) -> None:
        pass

    def move(self, board: chess.Board) -> MoveChoice:
        result = self.engine.play(board, self.limit)
        return MoveChoice(result.move.uci() if result.move else None)

    def close(self) -> None:
        self.engine.quit()


def model_fingerprint(spec: PlayerSpec) -> str | None:
    """What identifies the model a player loads from a local path: a hash of its files' names,
    sizes and modification times (a folder's files, or the one file), so a model trained again
    into the same folder is told apart from the one an earlier game was played with. None for a
    player without a local model (random, sft, Stockfish, a UCI engine, an ``s3://`` model).

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "model.safetensors").write_bytes(b"1")
    >>> spec = parse_player_spec(f"lm:{folder}")
    >>> before = model_fingerprint(spec)
    >>> _ = (folder / "model.safetensors").write_bytes(b"22")
    >>> before != model_fingerprint(spec), model_fingerprint(parse_player_spec("random"))
    (True, None)
    """
    import hashlib
    from pathlib import Path

    if spec.kind not in ("lm", "judge", "mcts") or not spec.path or "://" in spec.path:
        return None
    root = Path(spec.path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest = hashlib.sha1()
    for p in files:
        if p.exists():
            stat = p.stat()
            digest.update(
                f"{p.relative_to(root) if root.is_dir() else p.name}:{stat.st_size}:{stat.st_mtime_ns};".encode()
            )
    return digest.hexdigest()[:16]
