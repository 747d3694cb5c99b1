"""PPO for a chess language model, Ray-free: episodes where the policy plays one colour and the
experience they record; the learner's side (rewards, GAE, the update) is
:mod:`chessrl.rl.ppo_learner`. The Ray phase (``pipelines/ppo.py``) runs the same pieces on
collectors and a Ray Train learner; :func:`ppo_iteration` on one process is also the baseline
that ``bench/rl_step.py`` compares it with.

One policy move is one action, one token (the chess tokenizer has a token per UCI move; a
tokenizer without one is refused by :class:`chessrl.lm.legality.MoveTokens`). For each action the
collector records the prompt (the game so far), the sampled token, its log-probability under the
sampling policy and the weights' version, whether it was a legal move, and its score: the reward
model's, normalised, or Stockfish's grade of it (:func:`scaled_grades`, ``ppo.reward: stockfish``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import chess
import pyarrow as pa
import torch

from chessrl.arena.players import PlayerSpec, parse_player_spec
from chessrl.engine.client import Score
from chessrl.engine.move_value import ValueScale, move_value, position_value
from chessrl.lm.legality import MoveTokens
from chessrl.rl.ppo_learner import last_token_logits, make_batch, ppo_update
from chessrl.rl.ppo_types import Action, PPOSettings  # noqa: F401 - re-exported: PPO's settings and actions
from cluster.errors import ConfigError


def scaled_grades(
    queries: Sequence[tuple[Sequence[str], str]],
    scores: Callable[[list[str]], list[Score]],
    scale: ValueScale,
    max_loss: float = 0.5,
    dead_zone: float = 0.0,
    *,
    start_fen: str = chess.STARTING_FEN,
) -> list[float]:
    """Stockfish's grade of each legal ``(moves so far, move)`` (the moves from ``start_fen``), as
    grpo grades a move: how much of the best move's value it keeps, ``clamp(1 - loss / max_loss,
    0, 1)``, losses up to ``dead_zone`` counted as none. The loss is the position's value on
    ``scale`` (:mod:`chessrl.engine.move_value`; its best move's) less the move's, the move's value
    read with the game's moves on the board, so with ``margin`` a repetition or a stalemate in a won
    position is graded as the draw it is. ``scores(fens)`` is the engine's score of each position
    for its side to move (``Analysis.score``), asked once for the distinct positions.

    In a won position (White a rook up; the engine's view of each position after a move made up
    for the example), mating keeps everything and going back to a position seen twice gives it
    away, where the expected score grades both alike:

    >>> from chessrl.engine.client import Score
    >>> start = "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"
    >>> seen = ["g1f1", "g8f8", "f1g1", "f8g8", "g1f1", "g8f8", "f1g1", "f8g8"]   # twice through the start
    >>> up, down = Score(cp=600, mate=None, wdl=(990, 10, 0)), Score(cp=-600, mate=None, wdl=(0, 10, 990))
    >>> score = lambda fens: [up if " w " in fen else down for fen in fens]
    >>> queries = [(seen, "d1d8"), (seen, "g1f1"), (seen, "h2h3")]
    >>> [round(g, 2) for g in scaled_grades(queries, score, "margin", start_fen=start)]
    [1.0, 0.35, 1.0]
    >>> [round(g, 2) for g in scaled_grades(queries, score, "expected", start_fen=start)]
    [1.0, 1.0, 1.0]
    """
    roots, afters = [], []
    for moves, move in queries:
        board = chess.Board(start_fen)
        for m in moves:
            board.push_uci(m)
        roots.append(board.fen())
        board.push_uci(move)
        afters.append(board)
    distinct = sorted(set(roots) | {b.fen() for b in afters})
    score = dict(zip(distinct, scores(distinct), strict=True))
    grades = []
    for root, after in zip(roots, afters, strict=True):
        loss = max(0.0, position_value(score[root], scale) - move_value(after, score[after.fen()], scale))
        loss = 0.0 if loss <= dead_zone else loss
        grades.append(float(min(1.0, max(0.0, 1.0 - loss / max_loss))))
    return grades


def sample_actions(
    model: Any,
    rows: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    generator: torch.Generator,
    legal: Sequence[Sequence[int]] | None = None,
) -> tuple[list[int], list[float]]:
    """One batched forward pass: a sampled next token per row and its log-probability; with
    ``legal`` (each row's legal move tokens) drawn from the masked policy."""
    if legal is not None:
        tokens, chosen = sample_masked(model, rows, pad_id, temperature, generator, legal, 1)
        return [t[0] for t in tokens], [c[0] for c in chosen]
    with torch.no_grad():
        raw = last_token_logits(model, rows, pad_id)
        logp = torch.log_softmax(raw / max(temperature, 1e-6), dim=-1)
        tokens = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(-1)
    picked = logp.cpu().gather(-1, tokens.view(-1, 1)).squeeze(-1)
    return tokens.tolist(), picked.tolist()


def sample_masked(
    model: Any,
    rows: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    generator: torch.Generator,
    legal: Sequence[Sequence[int]],
    n: int,
) -> tuple[list[list[int]], list[list[float]]]:
    """One batched forward pass: ``n`` tokens per row drawn (with replacement) from the policy
    restricted to the row's ``legal`` move tokens, and their masked log-probabilities."""
    from chessrl.lm.masked import masked_log_softmax, pad_ids

    with torch.no_grad():
        raw = last_token_logits(model, rows, pad_id)
        table = pad_ids(legal)
        logp = masked_log_softmax(raw, table.to(raw.device), temperature).cpu()
        picks = torch.multinomial(logp.exp(), n, replacement=True, generator=generator)
    return table.gather(-1, picks).tolist(), logp.gather(-1, picks).tolist()


#: An opponent chooses a move for each board it is given (batched; a random mover, a frozen
#: policy, Stockfish through the EnginePool).
Opponent = Callable[[Sequence[chess.Board]], list[chess.Move]]


def random_opponent(seed: int) -> Opponent:
    """A uniformly random legal mover."""
    rng = random.Random(seed)

    def choose(boards: Sequence[chess.Board]) -> list[chess.Move]:
        return [rng.choice(list(b.legal_moves)) for b in boards]

    return choose


@dataclass
class Episode:
    """A game in progress: the policy plays ``colour`` from ``moves`` (UCI from the start)."""

    name: str
    board: chess.Board
    colour: chess.Color
    opponent: int
    moves: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    done: bool = False
    max_actions: int = 1 << 30
    """The policy moves this episode may take (T, or 1 for a table position)."""


def result_for(board: chess.Board, colour: chess.Color) -> float:
    """+1 / -1 / 0 from ``colour``'s side for a finished game; 0 for an unfinished one."""
    outcome = board.outcome(claim_draw=True)
    if outcome is None or outcome.winner is None:
        return 0.0
    return 1.0 if outcome.winner == colour else -1.0


def play_episodes(
    policy: Any,
    tokenizer: Any,
    moves_table: MoveTokens,
    starts: Sequence[tuple[str, Sequence[str]]],
    opponents: Sequence[Opponent],
    settings: PPOSettings,
    max_actions: int | Sequence[int],
    version: int,
    generator: torch.Generator,
    score: Callable[[list[tuple[list[str], str]]], list[float]],
    seed: int = 0,
    refresh: Callable[[], tuple[Any, int] | None] | None = None,
) -> list[Action]:
    """Play one episode per start ``(name, moves so far)`` at once: the policy moves for every
    game whose turn it is in one forward pass, the opponents answer, until each game ends, an
    illegal move, or ``max_actions`` policy moves (one limit for all, or one per start: 1 makes a
    start a single graded move, a table position). The policy plays the side to move at the
    start; opponents are taken in turn. ``score([(moves, move), ...])`` gives the legal moves'
    scores (the reward model's, normalised, or :func:`scaled_grades`), batched per step. ``refresh()``, called between moves,
    returns ``(newer policy, its version)`` or None: each action records the version that chose
    it. Returns every action."""
    from chessrl.lm.formats import get_format
    from chessrl.lm.masked import MaskedMoves
    from chessrl.lm.models import prompt_ids

    fmt = get_format(settings.text_format)
    masked = MaskedMoves(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    episodes = _start_episodes(starts, len(opponents))
    limits = [max_actions] * len(episodes) if isinstance(max_actions, int) else list(max_actions)
    if len(limits) != len(episodes):
        raise ValueError(f"max_actions: {len(limits)} limits for {len(episodes)} starts")
    for e, limit in zip(episodes, limits, strict=True):
        e.max_actions = limit
    while True:
        live = [e for e in episodes if not e.done]
        if not live:
            break
        newer = refresh() if refresh is not None else None
        if newer is not None:
            policy, version = newer
        # the policy's turn in every live game (opponents answered at the end of the last step)
        texts = [fmt.prompt_for(e.board, e.moves) for e in live]
        rows = [prompt_ids(tokenizer, t) for t in texts]
        # the move's token carries a space unless it opens an empty prompt (a game's first move, moves format)
        legal = [masked.legal_ids(e.board, bool(t.strip())) for e, t in zip(live, texts, strict=True)]
        if settings.masked:
            tokens, logprobs = sample_masked(
                policy, rows, pad, settings.temperature, generator, legal, max(1, settings.samples_per_state)
            )
        else:
            one, lps = sample_actions(policy, rows, pad, settings.temperature, generator)
            tokens, logprobs = [[t] for t in one], [[lp] for lp in lps]
        _record_moves(live, rows, legal, tokens, logprobs, moves_table, tokenizer, version, score)
        _opponents_reply(live, opponents, final_reply=settings.result_weight > 0)
    return _episode_actions(episodes)


def _start_episodes(starts: Sequence[tuple[str, Sequence[str]]], n_opponents: int) -> list[Episode]:
    """An episode per start, the policy playing the side to move, the opponents taken in turn."""
    episodes = []
    for i, (name, moves) in enumerate(starts):
        board = chess.Board()
        for uci in moves:
            board.push_uci(uci)
        episodes.append(Episode(name, board, board.turn, i % max(1, n_opponents), list(moves)))
    return episodes


def _record_moves(
    live: Sequence[Episode],
    rows: Sequence[list[int]],
    legal_ids: Sequence[list[int]],
    tokens: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]],
    moves_table: MoveTokens,
    tokenizer: Any,
    version: int,
    score: Callable[[list[tuple[list[str], str]]], list[float]],
) -> None:
    """Each live game's first sampled token as its next :class:`Action` (the others, masked and
    so legal, as its ``alt_*``): a legal move is played, it and the others are scored (one batched
    ``score`` call for them all), an illegal one ends the episode."""
    legal_queries: list[tuple[list[str], str]] = []
    owners: list[tuple[Action, int]] = []  # (action, -1: its move, j: its j-th other move)
    for e, row, ids, drawn, lps in zip(live, rows, legal_ids, tokens, logprobs, strict=True):
        token, logprob = drawn[0], lps[0]
        found = moves_table.move_of.get(token)
        move = found[0] if found else None
        legal = move is not None and move in e.board.legal_moves
        uci = move.uci() if move is not None else tokenizer.decode([token]).strip()
        action = Action(
            e.name,
            len(e.actions),
            row,
            token,
            uci,
            legal,
            logprob,
            version,
            opponent=e.opponent,
            legal_ids=list(ids),
            alt_ids=list(drawn[1:]),
            alt_logprobs=list(lps[1:]),
        )
        e.actions.append(action)
        if legal:
            for j, other in enumerate([token, *drawn[1:]]):
                legal_queries.append((list(e.moves), moves_table.move_of[other][0].uci()))
                owners.append((action, j - 1))
            e.board.push_uci(uci)
            e.moves.append(uci)
        else:
            e.done = True
    for (action, j), value in zip(owners, score(legal_queries) if legal_queries else [], strict=True):
        if j < 0:
            action.score = value
        else:
            action.alt_scores.append(value)


def _opponents_reply(
    live: Sequence[Episode], opponents: Sequence[Opponent], final_reply: bool = True
) -> None:
    """The opponents answer, batched per opponent; then a game that is over, or has had its
    ``max_actions`` policy moves, is done. ``final_reply`` False: no reply after an episode's
    last allowed move (it only matters to the game's result, which then has no weight)."""
    waiting = [
        e
        for e in live
        if not e.done
        and not e.board.is_game_over(claim_draw=True)
        and (final_reply or len(e.actions) < e.max_actions)
    ]
    for k, opponent in enumerate(opponents):
        mine = [e for e in waiting if e.opponent == k]
        if mine:
            for e, reply in zip(mine, opponent([e.board for e in mine]), strict=True):
                e.board.push(reply)
                e.moves.append(reply.uci())
    for e in live:
        if e.done:
            continue
        if e.board.is_game_over(claim_draw=True) or len(e.actions) >= e.max_actions:
            e.done = True


def _episode_actions(episodes: Sequence[Episode]) -> list[Action]:
    """Every episode's actions in order; the last one of each marked, with the game's result
    when that move was legal."""
    out = []
    for e in episodes:
        if e.actions:
            e.actions[-1].last = True
            if e.actions[-1].legal:
                e.actions[-1].result = result_for(e.board, e.colour)
        out.extend(e.actions)
    return out


#: What ``ppo.opponents`` may name.
OPPONENTS_ALLOWED = "self, random, stockfish[:skill=N|elo=N|nodes=N|random=P,...]"


@dataclass(frozen=True)
class OpponentSpec:
    """One opponent of the pool: ``self`` (the policy as the collector last pulled it, sampled at
    the policy's temperature), ``random``, or ``stockfish[:...]`` (weak Stockfish, the player
    syntax of ``evaluate``).

    >>> parse_opponent("stockfish:skill=0").player.skill_level
    0
    """

    kind: Literal["self", "random", "stockfish"]
    text: str
    player: PlayerSpec | None = None


def parse_opponent(spec: str, key: str = "ppo.opponents (--opponents)") -> OpponentSpec:
    """Parse one opponent; anything else is a :class:`ConfigError` naming ``key`` and what is allowed."""
    text = spec.strip()
    if text in ("self", "random"):
        return OpponentSpec(text, text)  # type: ignore[arg-type]
    if text == "stockfish" or text.startswith("stockfish:"):
        return OpponentSpec("stockfish", text, parse_player_spec(text, key=key))
    raise ConfigError(f"{key}: unknown opponent {spec!r}; allowed: {OPPONENTS_ALLOWED}")


def policy_opponent(
    model: Any,
    tokenizer: Any,
    moves_table: MoveTokens,
    temperature: float,
    generator: torch.Generator,
    text_format: str = "moves",
) -> Opponent:
    """The policy itself as an opponent: one batched forward pass for all boards (each asked in
    ``text_format``), a sampled move each; an illegal sample is replaced by a random legal move
    (the opponent's moves are observations, never trained on)."""
    from chessrl.lm.formats import get_format
    from chessrl.lm.models import prompt_ids

    fmt = get_format(text_format)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rng = random.Random(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))

    def choose(boards: Sequence[chess.Board]) -> list[chess.Move]:
        rows = [prompt_ids(tokenizer, fmt.prompt_for(b, [m.uci() for m in b.move_stack])) for b in boards]
        tokens, _ = sample_actions(model, rows, pad, temperature, generator)
        out = []
        for board, token in zip(boards, tokens, strict=True):
            found = moves_table.move_of.get(token)
            move = found[0] if found else None
            out.append(
                move
                if move is not None and move in board.legal_moves
                else rng.choice(list(board.legal_moves))
            )
        return out

    return choose


def is_table_episode(name: str) -> bool:
    """Whether an episode (or a drawn sibling, ``<episode>/<t>.<j>``) is a table position's one
    move: its collector round's prefix ends in ``t`` (``c0-000012t-3``; own games ``c0-000012-3``).

    >>> is_table_episode("c0-000012t-3"), is_table_episode("c0-000012-3/0.1"), is_table_episode("a")
    (True, False, False)
    """
    return name.split("/")[0].rsplit("-", 1)[0].endswith("t")


def start_positions(
    games: Iterable[Mapping[str, Any]], n: int, *, seed: int, max_ply: int, prefix: str
) -> list[tuple[str, list[str]]]:
    """``n`` episode starts ``(name, moves so far)``: a seeded game of ``games`` (rows with a
    ``moves`` string of UCI moves) cut at a ply in ``[0, max_ply]`` where the game went on, so
    the side to move has a move; the start position when there are no games.

    >>> start_positions([{"moves": "e2e4 e7e5 g1f3"}], 2, seed=3, max_ply=1, prefix="c0")
    [('c0-0', []), ('c0-1', ['e2e4'])]
    """
    rng = random.Random(seed)
    pool = [str(g["moves"]).split() for g in games if g.get("moves")]
    out: list[tuple[str, list[str]]] = []
    for i in range(n):
        moves = rng.choice(pool) if pool else []
        ply = rng.randint(0, min(max_ply, len(moves) - 1)) if moves else 0
        out.append((f"{prefix}-{i}", moves[:ply]))
    return out


#: A rollout shard: one row per policy action (episode order kept).
ROLLOUT_SCHEMA = pa.schema(
    [
        ("episode", pa.string()),
        ("t", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("action_id", pa.int32()),
        ("move", pa.string()),
        ("legal", pa.bool_()),
        ("logprob", pa.float64()),
        ("version", pa.int64()),
        ("score", pa.float64()),
        ("result", pa.float64()),
        ("last", pa.bool_()),
        ("opponent", pa.int32()),
        ("legal_ids", pa.list_(pa.int32())),
        ("alt_ids", pa.list_(pa.int32())),
        ("alt_logprobs", pa.list_(pa.float64())),
        ("alt_scores", pa.list_(pa.float64())),
    ]
)


def rollout_table(actions: Sequence[Action]) -> pa.Table:
    """Actions as a :data:`ROLLOUT_SCHEMA` table (see :func:`actions_from_rows` for the way back).

    >>> a = Action("g0", 0, [1, 5], 9, "e2e4", True, -0.5, 3, score=0.2, last=True)
    >>> actions_from_rows(rollout_table([a]).to_pylist()) == [a]
    True
    """
    rows = [asdict(a) for a in actions]
    return pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA)


def actions_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Action]:
    """Rows of a rollout shard (``to_pylist()``, Ray Data rows) as :class:`Action` s."""
    names = [f.name for f in ROLLOUT_SCHEMA]
    lists = {f.name for f in ROLLOUT_SCHEMA if pa.types.is_list(f.type)}
    newer = {"legal_ids", "alt_ids", "alt_logprobs", "alt_scores"}  # absent from shards written before them
    out = []
    for r in rows:
        values = {k: r.get(k) if k in newer else r[k] for k in names}
        for k in lists:  # Ray Data hands lists as arrays; a shard written before a column has None
            values[k] = [
                x.item() if hasattr(x, "item") else x for x in (values[k] if values[k] is not None else [])
            ]
        out.append(Action(**values))
    return out


def stale_episodes(actions: Sequence[Action], learner_version: int, max_staleness: int) -> set[str]:
    """Episodes with an action chosen by weights more than ``max_staleness`` versions older than
    the learner's (the learner drops them whole: GAE needs every action of an episode).

    >>> a = [Action("x", 0, [1], 2, "e2e4", True, 0.0, 1), Action("y", 0, [1], 2, "e2e4", True, 0.0, 3)]
    >>> stale_episodes(a, learner_version=4, max_staleness=2)
    {'x'}
    """
    return {a.episode for a in actions if learner_version - a.version > max_staleness}


def ppo_iteration(
    policy: Any,
    reference: Any,
    critic: Any,
    policy_opt: torch.optim.Optimizer | None,
    critic_opt: torch.optim.Optimizer,
    tokenizer: Any,
    moves_table: MoveTokens,
    starts: Sequence[tuple[str, Sequence[str]]],
    opponents: Sequence[Opponent],
    settings: PPOSettings,
    max_actions: int,
    version: int,
    generator: torch.Generator,
    score: Callable[[list[tuple[list[str], str]]], list[float]],
) -> dict[str, float]:
    """One PPO iteration in one process, with no Ray: play the episodes, score them, train. The
    baseline of ``bench/rl_step.py``; the phase runs the same steps on collectors and a learner."""
    import time

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    started = time.perf_counter()
    policy.eval()
    actions = play_episodes(
        policy, tokenizer, moves_table, starts, opponents, settings, max_actions, version, generator, score
    )
    played = time.perf_counter()
    critic.eval()  # dropout off in both models throughout, as in the phase
    batch = make_batch(actions, reference, critic, pad, settings, moves_table=moves_table)
    metrics = ppo_update(policy, critic, policy_opt, critic_opt, batch, pad, settings, generator)
    done = time.perf_counter()
    metrics.update(play_s=played - started, learn_s=done - played, episodes=float(len(starts)))
    return metrics
