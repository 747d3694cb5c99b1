"""Paired move quality: two policies' legal-masked argmax moves on the same positions, each scored
by Stockfish as its expected-score loss against the position's best move, and the mean
difference with its 95% interval. Ray-free; every RL phase reports it for its start and final
policies on positions of held-out games.

Pairing is what makes a small gain visible: the two policies answer the same positions, a move
both pick is scored once (its loss is the same on both sides), and the interval is the one of the
per-position differences, so the spread between positions (an easy opening against a lost
endgame) cancels instead of drowning the change.

>>> q = paired_interval([0.30, 0.10, 0.00, 0.20], [0.10, 0.10, 0.00, 0.05], games=[0, 0, 1, 2])
>>> q.positions, q.games, round(q.start, 3), round(q.final, 3), round(q.gain, 4), q.equal_loss
(4, 3, 0.15, 0.062, 0.0875, 2)
>>> q.low < q.gain < q.high
True

Positions of one game are correlated, so they are drawn at most :data:`PER_GAME` a game and the
interval is clustered by game (:func:`cluster_variance`): ``G`` games give ``G - 1`` degrees of
freedom, however many positions each holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import chess

#: ``(fens) -> expected score of the side to move in each`` (Stockfish through the EnginePool).
Expected = Callable[[list[str]], list[float]]


def t_quantile(df: int, p: float = 0.975) -> float:
    """Student's t quantile: exact for ``df`` <= 30 (bisection on the t distribution's closed
    form for whole degrees of freedom), Cornish-Fisher from the normal's above (within 0.1%).

    >>> round(t_quantile(1), 2), round(t_quantile(2), 2), round(t_quantile(10), 2), round(t_quantile(1000), 2)
    (12.71, 4.3, 2.23, 1.96)
    """
    if df <= 0:
        return float("inf")
    if df <= 30:
        lo, hi = 0.0, 1e3
        for _ in range(200):
            mid = (lo + hi) / 2
            if (1 + _t_central(mid, df)) / 2 < p:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2
    z = _normal_quantile(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def _t_central(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` whole degrees of freedom (Abramowitz and Stegun
    26.7.3-4: a finite series in cos(theta), theta = atan(t / sqrt(df)))."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if df % 2 == 0:
        for k in range(2, df, 2):  # 1 + (1/2) c^2 + (1*3)/(2*4) c^4 + ...
            term *= c2 * (k - 1) / k
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    for k in range(3, df, 2):  # cos(theta) (1 + (2/3) c^2 + (2*4)/(3*5) c^4 + ...)
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def _normal_quantile(p: float) -> float:
    """The standard normal's quantile by bisection on ``erf`` (exact to 1e-12)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


#: The most positions of one game a paired measure takes: positions of one game are correlated
#: (the same structure, the same mistakes), so they are drawn without replacement, at most this
#: many a game, and the interval counts each game as one cluster (:func:`cluster_variance`).
PER_GAME = 4


def cluster_variance(values: Sequence[float], games: Sequence[int] | None = None) -> tuple[float, int]:
    """The variance of the mean of ``values`` and its degrees of freedom, robust to correlation
    within clusters (``games[i]``: the game position ``i`` came from; None: every position its
    own): ``G / (G - 1) * sum_g (sum_{i in g} (x_i - mean))^2 / n^2`` with ``G - 1`` degrees of
    freedom, the cluster-robust (CR1) form. With one position a game it is ``s^2 / n`` exactly,
    the plain formula; a game's positions that move together count as fewer independent draws.

    >>> v, df = cluster_variance([0.1, 0.3, 0.2, 0.0])
    >>> round(v, 6), df
    (0.004167, 3)
    >>> w, df2 = cluster_variance([0.1, 0.3, 0.2, 0.0, 0.3], games=[0, 1, 2, 3, 1])  # a copy in game 1
    >>> w > cluster_variance([0.1, 0.3, 0.2, 0.0, 0.3])[0], df2
    (True, 3)
    """
    n = len(values)
    groups = list(range(n)) if games is None else list(games)
    if len(groups) != n:
        raise ValueError(f"cluster variance: {n} values against {len(groups)} game ids")
    mean = sum(values) / max(1, n)
    sums: dict[int, float] = {}
    for g, x in zip(groups, values, strict=True):
        sums[g] = sums.get(g, 0.0) + (x - mean)
    clusters = len(sums)
    if clusters < 2:
        return float("inf"), 0
    return clusters / (clusters - 1) * sum(u * u for u in sums.values()) / n**2, clusters - 1


@dataclass(frozen=True)
class PairedQuality:
    """Mean expected-score loss of each policy's moves, and ``gain`` = start - final (positive:
    the final policy's moves lose less) with its 95% interval [low, high], clustered by game."""

    positions: int
    games: int
    """Games the positions came from: the interval's clusters."""
    start: float
    final: float
    gain: float
    low: float
    high: float
    equal_loss: int
    """Positions where both moves lose the same (the same move, or two equally good ones)."""
    same_move: int | None
    """Positions where both policies chose the same move (None: moves not given)."""

    def to_dict(self) -> dict[str, float | None]:
        return {k: None if v is None else float(v) for k, v in asdict(self).items()}

    def line(self) -> str:
        """``expected-score loss 0.1500 (start) -> 0.0625 (final) on 4 positions of 4 games: ...``"""
        same = (
            f", same move in {self.same_move / max(1, self.positions):.0%}"
            if self.same_move is not None
            else ""
        )
        return (
            f"expected-score loss {self.start:.4f} (start) -> {self.final:.4f} (final) on {self.positions} positions "
            f"of {self.games} games: gain {self.gain:+.4f} [{self.low:+.4f}, {self.high:+.4f}] (95%, by game){same}"
        )


def paired_interval(
    start: Sequence[float],
    final: Sequence[float],
    *,
    games: Sequence[int] | None = None,
    moves: tuple[Sequence[str], Sequence[str]] | None = None,
) -> PairedQuality:
    """The paired comparison of two policies' per-position losses (same positions, same order):
    the mean difference with a t interval whose variance is clustered by ``games`` (the game of
    each position; None: positions independent), and, given both policies' ``moves``, how often
    they chose the same one."""
    if len(start) != len(final):
        raise ValueError(f"paired losses: {len(start)} against {len(final)} positions")
    n = len(start)
    diffs = [a - b for a, b in zip(start, final, strict=True)]
    mean = sum(diffs) / max(1, n)
    variance, df = cluster_variance(diffs, games)
    half = t_quantile(df) * math.sqrt(variance) if df > 0 else float("inf")
    same_move = sum(a == b for a, b in zip(*moves, strict=True)) if moves is not None else None
    return PairedQuality(
        n,
        len(set(games)) if games is not None else n,
        sum(start) / max(1, n),
        sum(final) / max(1, n),
        mean,
        mean - half,
        mean + half,
        sum(a == b for a, b in zip(start, final, strict=True)),
        same_move,
    )


@dataclass(frozen=True)
class OverRuns:
    """The paired gain of several runs' final policies (e.g. one learner from several seeds) over
    one start on the same positions: ``gain``, the mean of the runs' gains, with a 95% interval
    [low, high] that counts both the spread between runs and the positions' (clustered by game;
    ``df``: its degrees of freedom); ``run_sd``, the runs' gains' standard deviation."""

    runs: int
    positions: int
    games: int
    gain: float
    low: float
    high: float
    run_sd: float
    df: float

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    def line(self) -> str:
        """``over 3 runs: gain -0.0003 [-0.0290, +0.0284] (95%; ...)``"""
        return (
            f"over {self.runs} runs: gain {self.gain:+.4f} [{self.low:+.4f}, {self.high:+.4f}] (95%; "
            f"the runs' gains' sd {self.run_sd:.4f}, on {self.positions} positions of {self.games} games)"
        )


def paired_over_runs(
    start: Sequence[float], finals: Sequence[Sequence[float]], games: Sequence[int] | None = None
) -> OverRuns:
    """The mean paired gain of ``finals`` (each run's per-position losses) over ``start`` (the
    losses of their common start, same positions, same order), and its interval.

    One run's paired interval counts the positions' noise only: the same configuration run again
    with another seed moves the masked argmax among near-ties and gives another gain. With ``R``
    runs on ``N`` positions (``d[r][p]`` = start loss - run ``r``'s loss at position ``p``) the
    variance of the mean gain is ``s_runs^2 / R + V_positions``: ``s_runs`` the sd of the runs'
    gains, ``V_positions`` the variance of the mean over positions of the runs' mean difference,
    clustered by ``games`` (:func:`cluster_variance`; their shared residual counted twice:
    slightly conservative), with Welch-Satterthwaite's degrees of freedom for the t quantile. It
    needs two runs at least.

    >>> start = [0.3, 0.1, 0.2, 0.0, 0.4, 0.2]
    >>> q = paired_over_runs(start, [[0.2, 0.1, 0.1, 0.0, 0.3, 0.2], [0.3, 0.0, 0.2, 0.0, 0.2, 0.1]])
    >>> q.runs, q.positions, round(q.gain, 4), q.low < q.gain < q.high
    (2, 6, 0.0583, True)
    >>> paired_over_runs(start, [[0.3, 0.0, 0.2, 0.0, 0.2, 0.1]] * 3).run_sd   # the same run thrice
    0.0
    """
    runs, n = len(finals), len(start)
    if runs < 2:
        raise ValueError(f"a gain over runs needs two runs at least, got {runs}")
    if n < 2 or any(len(f) != n for f in finals):
        raise ValueError(f"paired losses: every run needs the start's {n} positions (two at least)")
    diffs = [[a - b for a, b in zip(start, final, strict=True)] for final in finals]
    gains = [sum(d) / n for d in diffs]
    gain = sum(gains) / runs
    per_position = [sum(d[p] for d in diffs) / runs for p in range(n)]
    run_var = sum((g - gain) ** 2 for g in gains) / (runs - 1)
    b, position_df = cluster_variance(per_position, games)
    a = run_var / runs
    clusters = len(set(games)) if games is not None else n
    se = math.sqrt(a + b)
    if se == 0.0:
        return OverRuns(runs, n, clusters, gain, gain, gain, 0.0, float(runs - 1))
    df = (a + b) ** 2 / (a**2 / (runs - 1) + (b**2 / position_df if position_df else math.inf))
    half = t_quantile(max(1, math.floor(df))) * se
    return OverRuns(runs, n, clusters, gain, gain - half, gain + half, math.sqrt(run_var), df)


def move_losses(
    fens: Sequence[str], moves: dict[str, Sequence[str]], expected: Expected
) -> dict[str, list[float]]:
    """Each policy's expected-score loss per position: ``best - E(move)``, ``E(move)`` the side
    to move's expected score after the move (one engine call for the roots and every distinct
    child; a move chosen by two policies is analysed once). ``best`` is the higher of the root's
    evaluation and every analysed child's, so no loss is negative (and differences between two
    policies do not depend on it)."""
    children: dict[tuple[str, str], str] = {}
    for picks in moves.values():
        for fen, move in zip(fens, picks, strict=True):
            if (fen, move) not in children:
                board = chess.Board(fen)
                board.push_uci(move)
                children[(fen, move)] = board.fen()
    roots = sorted(set(fens))
    keys = list(children)
    values = expected(roots + [children[k] for k in keys])
    root_value = dict(zip(roots, values[: len(roots)], strict=True))
    after = {k: 1.0 - v for k, v in zip(keys, values[len(roots) :], strict=True)}
    best = dict(root_value)
    for (fen, _), value in after.items():
        best[fen] = max(best[fen], value)
    return {
        name: [best[fen] - after[(fen, move)] for fen, move in zip(fens, picks, strict=True)]
        for name, picks in moves.items()
    }


@runtime_checkable
class MoveChooser(Protocol):
    """A policy that picks its own move in each ``(fen, moves so far)`` position and says the
    share of them where its answer was legal unaided (:class:`chessrl.rl.scorer_policy.ScorerPolicy`)."""

    def pick_moves(self, positions: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[str], float]: ...


def masked_argmax(
    model: Any,
    tokenizer: Any,
    positions: Sequence[tuple[str, Sequence[str]]],
    text_format: str,
    batch: int = 64,
) -> tuple[list[str], float]:
    """A policy's legal-masked argmax move in each ``(fen, moves so far)`` position, asked in
    ``text_format``, and the share of positions where its unmasked argmax was a legal move. A
    ``model`` that picks its own moves (a :class:`MoveChooser`: a scorer, which reads each move in
    its own format) is asked them instead."""
    from chessrl.lm.formats import get_format
    from chessrl.lm.masked import answer_spaced, masked_moves
    from chessrl.lm.models import prompt_ids

    if isinstance(model, MoveChooser):
        return model.pick_moves(positions)
    fmt = get_format(text_format)
    was_training = model.training
    model.eval()
    moves: list[str] = []
    legal = 0
    try:
        for start in range(0, len(positions), batch):
            part = positions[start : start + batch]
            boards = [chess.Board(fen) for fen, _ in part]
            rows = [
                prompt_ids(tokenizer, fmt.prompt_for(b, list(h)))
                for b, (_, h) in zip(boards, part, strict=True)
            ]
            spaced = [answer_spaced(fmt, h) for _, h in part]
            for choice in masked_moves(model, tokenizer, boards, rows, spaced):
                moves.append(choice.moves[0])
                legal += int(choice.unmasked_legal)
    finally:
        model.train(was_training)
    return moves, legal / max(1, len(positions))


@dataclass(frozen=True)
class PairedPosition:
    """A position the paired measure asks: its FEN, the moves that led to it (what a moves-format
    policy reads) and the game it came from (the interval's cluster)."""

    fen: str
    moves: tuple[str, ...]
    game: int


def runs_move_quality(
    start: tuple[Any, Any, str],
    runs: dict[str, tuple[Any, Any, str]],
    positions: Sequence[PairedPosition],
    expected: Expected,
) -> dict[str, Any]:
    """The one paired measure: each run's final policy against their common ``start`` on
    ``positions`` (each policy a ``(model, tokenizer, text format)``), every move scored in one
    ``expected`` call (Stockfish from an empty hash per position: :func:`stockfish_expected`, or
    the engine pool's ``fresh`` analyses). ``runs`` maps each run's name to its
    :class:`PairedQuality` figures (clustered by game) and unmasked greedy legal rate
    (``final_unmasked_legal``); ``start_unmasked_legal`` the start's; ``over_runs``, the
    :class:`OverRuns` figures with two runs or more (else None). Every phase's paired figure and
    ``evaluate --mode paired`` come from here."""
    fens = [p.fen for p in positions]
    asked = [(p.fen, p.moves) for p in positions]
    games = [p.game for p in positions]
    picks: dict[str, list[str]] = {}
    legal: dict[str, float] = {}
    for name, (model, tokenizer, text_format) in {"": start, **runs}.items():
        picks[name], legal[name] = masked_argmax(model, tokenizer, asked, text_format)
    losses = move_losses(fens, picks, expected)
    out: dict[str, Any] = {
        "positions": len(positions),
        "games": len(set(games)),
        "start_unmasked_legal": legal[""],
        "runs": {
            name: paired_interval(
                losses[""], losses[name], games=games, moves=(picks[""], picks[name])
            ).to_dict()
            | {"final_unmasked_legal": legal[name]}
            for name in runs
        },
        "over_runs": None,
    }
    if len(runs) >= 2:
        out["over_runs"] = paired_over_runs(losses[""], [losses[name] for name in runs], games).to_dict()
    return out


def paired_move_quality(
    models: dict[str, tuple[Any, Any]],
    positions: Sequence[PairedPosition],
    text_format: str,
    expected: Expected,
) -> dict[str, Any]:
    """A phase's figure: ``models["final"]`` against ``models["start"]`` (each ``(model,
    tokenizer)``, both asked in ``text_format``) through :func:`runs_move_quality`, flat: the
    :class:`PairedQuality` figures plus ``start_unmasked_legal`` and ``final_unmasked_legal``."""
    start, final = ((*models[name], text_format) for name in ("start", "final"))
    q = runs_move_quality(start, {"final": final}, positions, expected)
    return q["runs"]["final"] | {"start_unmasked_legal": q["start_unmasked_legal"]}


def quality_line(q: dict[str, Any]) -> str:
    """The summary line of :func:`paired_move_quality`'s figures."""
    same = q.get("same_move")
    pq = PairedQuality(
        int(q["positions"]),
        int(q["games"]),
        q["start"],
        q["final"],
        q["gain"],
        q["low"],
        q["high"],
        int(q["equal_loss"]),
        None if same is None else int(same),
    )
    return (
        pq.line()
        + f"; unmasked greedy legal {q['start_unmasked_legal']:.1%} -> {q['final_unmasked_legal']:.1%}"
    )


@contextmanager
def stockfish_expected(nodes: int, path: str | None = None) -> Iterator[Expected]:
    """An :data:`Expected` backed by one local Stockfish at ``nodes`` nodes a position (for a
    driver that has no EnginePool: ppo's summary), each from an empty hash: a position's value
    does not depend on what was analysed before it (carried over, it moved a paired gain by 0.004
    at 2,000 nodes), so the same positions and moves give the same figure in any order."""
    from chessrl.engine.client import SearchLimit, find_stockfish
    from chessrl.engine.group import EngineGroup

    with EngineGroup(1, path=find_stockfish(path)) as engines:
        yield lambda fens: [
            a.score.expected for a in engines.analyse(fens, SearchLimit(nodes=nodes), fresh=True)
        ]


def heldout_positions(games: Sequence[Any], n: int, seed: int) -> list[PairedPosition]:
    """Up to ``n`` seeded positions of ``games`` (held-out game rows with a ``moves`` string) for
    the paired measure, in the default phase mix (20% openings, 60% middlegames, 20% endgames):
    without replacement, at most :data:`PER_GAME` of a game, no start position
    (:meth:`chessrl.data.positions.PositionSampler.sample_distinct`)."""
    from chessrl.data.positions import PositionSampler

    picks = PositionSampler(games).sample_distinct(n, per_game=PER_GAME, seed=seed)
    return [PairedPosition(p.fen, p.history, p.game) for p in picks]
