"""What the reward model reads and how its score is used, Ray-free: the query (a position and a
move), its text and token ids, batched scoring, and the normalisation PPO applies.

A query is the game so far (UCI moves from the start, or from ``fen``) and the move to judge. What
the reward model reads is its text format, named in its config (``chessrl_text_format``, as a
policy's): ``moves``, ``<bos> moves so far + " " + move <eos>`` (the preference pairs' text), or
``board``, the position before the move one character a square (:class:`chessrl.lm.formats.BoardFormat`)
and ``M: move``: a judge that sees the board. The EOS is the one TRL's ``RewardTrainer``
appends, so a score through :func:`score_ids` equals one through ``transformers`` alone.

>>> q = RewardQuery(moves=("e2e4", "e7e5"), move="g1f3")
>>> q.text()
'e2e4 e7e5 g1f3'
>>> from chessrl.lm.formats import BoardFormat
>>> q.text(BoardFormat()).endswith("M: g1f3")
True
>>> RewardQuery(moves=("e2e4",), move="e2e4").validate()
Traceback (most recent call last):
...
chessrl.rl.reward.InvalidQueryError: illegal move 'e2e4' after e2e4 (rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1)
>>> Normalizer(mean=0.5, std=2.0).apply(1.5)
0.5
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chess

from chessrl.lm.formats import MovesFormat, TextFormat, get_format
from cluster.errors import UserError

#: The key of a reward model's config that names what it reads (``moves`` or ``board``); a model
#: without it reads moves.
TEXT_FORMAT_KEY = "chessrl_text_format"


class InvalidQueryError(UserError, ValueError):
    """A reward query whose position or move is not legal chess."""


@dataclass(frozen=True)
class RewardQuery:
    """A move to judge: ``move`` after ``moves`` (UCI, from the start position or from ``fen``)."""

    moves: tuple[str, ...]
    move: str
    fen: str | None = None

    def board(self) -> chess.Board:
        """The position before ``move``; an :class:`InvalidQueryError` for a bad FEN or move list."""
        try:
            board = chess.Board(self.fen) if self.fen else chess.Board()
        except ValueError as exc:
            raise InvalidQueryError(f"bad FEN {self.fen!r}: {exc}") from None
        if self.fen and not board.is_valid():
            raise InvalidQueryError(f"bad FEN {self.fen!r}: not a legal position")
        for i, uci in enumerate(self.moves):
            try:
                board.push_uci(uci)
            except ValueError:
                raise InvalidQueryError(
                    f"move {i + 1} of the game ({uci!r}) is not legal in {board.fen()}"
                ) from None
        return board

    def validate(self, board: chess.Board | None = None) -> chess.Board:
        """The position before the move, checked: the move must be legal there (``board``: that
        position, when the caller has already built it)."""
        board = self.board() if board is None else board
        try:
            move = chess.Move.from_uci(self.move)
        except ValueError:
            raise InvalidQueryError(f"{self.move!r} is not a UCI move") from None
        if move not in board.legal_moves:
            after = " ".join(self.moves) or "the start"
            raise InvalidQueryError(f"illegal move {self.move!r} after {after} ({board.fen()})")
        return board

    def text(self, fmt: TextFormat | None = None, board: chess.Board | None = None) -> str:
        """The text the reward model reads in ``fmt`` (default moves): the game up to and
        including the move, or the position before it and the move (``board``, when the caller
        already has it from :meth:`validate`, is not rebuilt)."""
        fmt = fmt or MovesFormat()
        if isinstance(fmt, MovesFormat):
            return fmt.prompt(self.moves) + fmt.completion(self.moves, self.move)
        return fmt.judged_text(board if board is not None else self.board(), self.move)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardQuery:
        return cls(tuple(data.get("moves", ())), str(data["move"]), data.get("fen"))


class PositionCache:
    """Checks queries as :meth:`RewardQuery.validate` does, but remembers the positions it built,
    so a query whose game it saw a few moves earlier costs only the new moves: a rollout
    collector asks about the same games step after step (replaying a 60-move game with legality
    checks costs ~1 ms; two more moves ~30 us). The boards it returns are shared: read them, never
    push onto them.

    >>> cache = PositionCache(size=8)
    >>> cache.validate(RewardQuery(("e2e4", "e7e5"), "g1f3")).fen()
    'rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2'
    >>> cache.validate(RewardQuery(("e2e4", "e7e5", "g1f3", "b8c6"), "f1b5")).fullmove_number, cache.hits
    (3, 1)
    >>> cache.validate(RewardQuery(("e2e4", "e7e5"), "e1e3"))
    Traceback (most recent call last):
    ...
    chessrl.rl.reward.InvalidQueryError: illegal move 'e1e3' after e2e4 e7e5 (rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2)
    """

    def __init__(self, size: int = 4096, lookback: int = 8) -> None:
        self.size, self.lookback = size, lookback
        self.boards: OrderedDict[tuple[str | None, tuple[str, ...]], chess.Board] = OrderedDict()
        self.hits = 0

    def board(self, query: RewardQuery) -> chess.Board:
        """The position before the query's move (shared; do not modify)."""
        key = (query.fen, query.moves)
        found = self.boards.get(key)
        if found is not None:
            self.boards.move_to_end(key)
            self.hits += 1
            return found
        for k in range(len(query.moves) - 1, max(-1, len(query.moves) - 1 - self.lookback), -1):
            base = self.boards.get((query.fen, query.moves[:k]))
            if base is not None:
                self.hits += 1
                board = base.copy(stack=False)
                for i in range(k, len(query.moves)):
                    try:
                        board.push_uci(query.moves[i])
                    except ValueError:
                        raise InvalidQueryError(
                            f"move {i + 1} of the game ({query.moves[i]!r}) is not legal in {board.fen()}"
                        ) from None
                break
        else:
            board = query.board()
        self.boards[key] = board
        if len(self.boards) > self.size:
            self.boards.popitem(last=False)
        return board

    def validate(self, query: RewardQuery) -> chess.Board:
        """:meth:`RewardQuery.validate` through the cache (the same errors)."""
        return query.validate(self.board(query))


def query_ids(
    tokenizer: Any, query: RewardQuery, fmt: TextFormat | None = None, board: chess.Board | None = None
) -> list[int]:
    """The token ids the reward model scores: the query's text in ``fmt`` (default moves; a
    model's own: :func:`reward_format`) with ``<bos>`` first and EOS last; ``board``: the
    position before the move, if the caller has it."""
    return text_ids(tokenizer, query.text(fmt, board))


def prepare_queries(
    tokenizer: Any, fmt: TextFormat, cache: PositionCache, queries: Sequence[RewardQuery | dict[str, Any]]
) -> list[list[int] | InvalidQueryError]:
    """Each query's :func:`query_ids` in ``fmt``, checked through ``cache``, or its own
    :class:`InvalidQueryError` in its place (a dict with no ``move``, an illegal move, a bad FEN):
    what the RewardServer does before its forward pass, and a caller may do for it.

    >>> tok = build_reward_model("tiny")[1]
    >>> out = prepare_queries(tok, MovesFormat(), PositionCache(), [RewardQuery((), "e2e4"), {"moves": []}])
    >>> isinstance(out[0], list), type(out[1]).__name__
    (True, 'InvalidQueryError')
    """
    out: list[list[int] | InvalidQueryError] = []
    for query in queries:
        try:
            q = query if isinstance(query, RewardQuery) else RewardQuery.from_dict(query)
            out.append(query_ids(tokenizer, q, fmt, cache.validate(q)))
        except InvalidQueryError as exc:
            out.append(exc)
        except (KeyError, TypeError, ValueError) as exc:  # a malformed dict
            out.append(InvalidQueryError(f"not a reward query ({type(exc).__name__}: {exc}): {query!r}"))
    return out


def reward_format(config: Any) -> TextFormat:
    """What a reward model reads: the text format its config names (a ``PretrainedConfig`` or its
    dict), moves without one.

    >>> reward_format({"chessrl_text_format": "board"}).name, reward_format({}).name
    ('board', 'moves')
    """
    name = config.get(TEXT_FORMAT_KEY) if isinstance(config, dict) else getattr(config, TEXT_FORMAT_KEY, None)
    return get_format(str(name or "moves"))


def pair_texts(
    fmt: TextFormat, prompt: str, fen: str | None, chosen: str, rejected: str
) -> tuple[str, str] | None:
    """A preference row's two texts in ``fmt``: ``prompt + move`` for moves (the table's own
    text), else the position (rebuilt from the prompt's moves or ``fen``) and each move; None when
    a board format cannot rebuild the position.

    >>> from chessrl.lm.formats import BoardFormat
    >>> pair_texts(MovesFormat(), "e2e4", None, " e7e5", " a7a6")
    ('e2e4 e7e5', 'e2e4 a7a6')
    >>> c, r = pair_texts(BoardFormat(), "e2e4", None, " e7e5", " a7a6")
    >>> c.split("M:")[0] == r.split("M:")[0], c.endswith("M: e7e5"), r.endswith("M: a7a6")
    (True, True, True)
    >>> pair_texts(BoardFormat(), "e2e4 e2e4", None, " e7e5", " a7a6") is None
    True
    >>> pair_texts(MovesFormat(), "", "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", " d1d8", " g1f1") is None
    True
    """
    from chessrl.rl.dpo import position_of

    if isinstance(fmt, MovesFormat):
        if fen and (found_moves := position_of(prompt, fen)) is not None and found_moves[1] is None:
            return None  # a position given by its FEN alone (annotate's pairs): no move list to write
        return prompt + chosen, prompt + rejected
    found = position_of(prompt, fen)
    if found is None:
        return None
    return fmt.judged_text(found[0], chosen.strip()), fmt.judged_text(found[0], rejected.strip())


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids of a reward-model text (a preference pair's ``prompt + chosen`` or ``prompt +
    rejected``, or :meth:`RewardQuery.text`): the prompt ids with EOS last, exactly what TRL's
    ``RewardTrainer`` trains on and what :func:`query_ids` scores."""
    from chessrl.lm.models import prompt_ids

    return [*prompt_ids(tokenizer, text), tokenizer.eos_token_id]


def score_ids(model: Any, rows: Sequence[Sequence[int]], pad_id: int, batch_size: int = 64) -> list[float]:
    """The score of each row (``logits[:, 0]`` of a sequence-classification model, read at its
    last non-padding token), ``batch_size`` rows a forward pass, no grad. Rows that begin alike
    (one position's legal moves) read their shared beginning once
    (:func:`chessrl.lm.shared_prefix.classify_rows`): the same scores, ~8x faster for a judge."""
    from chessrl.lm.shared_prefix import classify_rows

    return classify_rows(model, rows, pad_id, batch_size)


def evaluate_reward_model(
    model: Any,
    pairs: Sequence[dict[str, Any]],
    positions: Sequence[dict[str, Any]],
    pad_id: int,
    legal_kinds: Sequence[str] = ("worse", "ranked", "random"),
) -> dict[str, float]:
    """Held-out figures of a reward model (put in eval mode for the call):

    - ``heldout_accuracy``: :func:`pairwise_accuracy` over ``pairs`` (``chosen_ids``,
      ``rejected_ids``, ``kind``), and ``heldout_accuracy_legal`` over those whose rejected move
      is legal (``legal_kinds``), and ``heldout_accuracy_<kind>`` for each kind (``random``:
      Stockfish's move against a random legal move);
    - ``heldout_spearman``: :func:`mean_spearman` over ``positions`` (``ids``: one row a legal
      move, ``cp``: Stockfish's scores of them), and how many positions counted;
    - the judge's bar on the same positions (:func:`judge_measures`):
      ``heldout_best_over_random_balanced``, ``heldout_best_over_worse`` and their counts.
    """
    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    try:
        if pairs:
            scores = score_ids(
                model, [p["chosen_ids"] for p in pairs] + [p["rejected_ids"] for p in pairs], pad_id
            )
            chosen, rejected = scores[: len(pairs)], scores[len(pairs) :]
            metrics["heldout_accuracy"] = pairwise_accuracy(chosen, rejected) or 0.0
            for kind in sorted({str(p["kind"]) for p in pairs}):  # e.g. Stockfish's move against a random one
                of_kind = [i for i, p in enumerate(pairs) if p["kind"] == kind]
                metrics[f"heldout_accuracy_{kind}"] = (
                    pairwise_accuracy([chosen[i] for i in of_kind], [rejected[i] for i in of_kind]) or 0.0
                )
            legal = [i for i, p in enumerate(pairs) if p["kind"] in legal_kinds]
            if legal:
                metrics["heldout_accuracy_legal"] = (
                    pairwise_accuracy([chosen[i] for i in legal], [rejected[i] for i in legal]) or 0.0
                )
        if positions:
            groups = [(score_ids(model, p["ids"], pad_id), p["cp"]) for p in positions]
            value, counted = mean_spearman(groups)
            if value is not None:
                metrics["heldout_spearman"] = value
                metrics["heldout_spearman_positions"] = float(counted)
            judged = judge_measures(groups)
            metrics.update({f"heldout_{k}": v for k, v in judged.items() if v == v})  # NaN: nothing to count
    finally:
        model.train(was_training)
    return metrics


@dataclass(frozen=True)
class Normalizer:
    """``(score - mean) / std``: the reward model's scores on its training pairs, saved with it
    (``chessrl_reward_mean`` / ``chessrl_reward_std`` in its config), so rewards start near 0 and 1."""

    mean: float = 0.0
    std: float = 1.0

    def apply(self, score: float) -> float:
        return (score - self.mean) / (self.std if self.std > 0 else 1.0)

    @classmethod
    def from_config(cls, config: Any) -> Normalizer:
        return cls(
            float(getattr(config, "chessrl_reward_mean", 0.0)),
            float(getattr(config, "chessrl_reward_std", 1.0)),
        )


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank.

    >>> ranks([10, 30, 20, 30])
    [1.0, 3.5, 2.0, 3.5]
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on average ranks); None when either side has fewer
    than two distinct values (no ranking to compare).

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    >>> spearman([1, 2, 3], [5, 5, 5]) is None
    True
    """
    if len(xs) != len(ys):
        raise ValueError(f"spearman: {len(xs)} values against {len(ys)}")
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5


def mean_spearman(groups: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[float | None, int]:
    """The mean of :func:`spearman` over groups (one group a position: the model's scores of its
    legal moves, and Stockfish's), and how many groups had a ranking on both sides.

    >>> mean_spearman([([1, 2, 3], [1, 2, 3]), ([1, 2, 3], [2, 1, 3]), ([1, 2], [0, 0])])
    (0.75, 2)
    """
    values = [r for r in (spearman(a, b) for a, b in groups) if r is not None]
    return (sum(values) / len(values) if values else None), len(values)


#: A balanced position: its best move's value within this many centipawns of even.
BALANCED_CP = 300
#: A move this much expected score below the best is one a judge must rank below it.
WORSE_BY = 0.1


def judge_measures(groups: Sequence[tuple[Sequence[float], Sequence[float]]]) -> dict[str, float]:
    """How well a judge's scores rank each position's legal moves against Stockfish's (one group a
    position: the judge's scores of its legal moves and Stockfish's centipawns of them, the
    mover's view):

    - ``best_over_random_balanced``: on balanced positions (the best move within
      :data:`BALANCED_CP` of even), how often Stockfish's best move scores above a legal move
      drawn at random among the others (ties half), averaged over the positions;
    - ``best_over_worse``: over every position, how often the best move scores above a move at
      least :data:`WORSE_BY` expected score worse (the expected score from centipawns, as
      :class:`chessrl.engine.client.Score` reads them), over all such pairs;
    - with the counts (``balanced_positions``, ``worse_pairs``).

    >>> m = judge_measures([([3.0, 1.0, 2.0], [50, -400, 20]), ([0.0, 1.0], [900, 0])])
    >>> m["best_over_random_balanced"], m["balanced_positions"], m["best_over_worse"], m["worse_pairs"]
    (1.0, 1.0, 0.5, 2.0)
    """
    from chessrl.engine.client import Score

    balanced: list[float] = []
    right = pairs = 0.0
    for scores, cps in groups:
        if len(scores) != len(cps) or len(cps) < 2:
            continue
        best = max(range(len(cps)), key=lambda i: cps[i])
        others = [i for i in range(len(cps)) if cps[i] < cps[best]]
        if not others:
            continue
        beats = [
            1.0 if scores[best] > scores[i] else 0.5 if scores[best] == scores[i] else 0.0 for i in others
        ]
        if abs(cps[best]) < BALANCED_CP:
            balanced.append(sum(beats) / len(beats))
        top = Score(cp=int(cps[best]), mate=None).expected
        for i, beat in zip(others, beats, strict=True):
            if Score(cp=int(cps[i]), mate=None).expected <= top - WORSE_BY:
                right, pairs = right + beat, pairs + 1
    return {
        "best_over_random_balanced": sum(balanced) / len(balanced) if balanced else float("nan"),
        "balanced_positions": float(len(balanced)),
        "best_over_worse": right / pairs if pairs else float("nan"),
        "worse_pairs": pairs,
    }


#: The judge's bar (chessrl.rl.reward.judge_measures) as summary keys.
JUDGE_KEYS = (
    "heldout_best_over_random_balanced",
    "heldout_balanced_positions",
    "heldout_best_over_worse",
    "heldout_worse_pairs",
)


def judge_line(summary: dict[str, Any]) -> str:
    """The judge's bar on the Spearman positions: Stockfish's best move above a random legal one on
    balanced positions (bar 80%), above any move 0.1 expected score worse (bar 85%), Spearman (0.5).

    >>> judge_line({"heldout_best_over_random_balanced": 0.62, "heldout_balanced_positions": 7.0,
    ...             "heldout_best_over_worse": 0.7, "heldout_worse_pairs": 40.0, "heldout_spearman": 0.21})
    '  judge         best above a random legal move 62.0% of 7 balanced positions (bar 80%); above a move 0.1 worse 70.0% of 40 pairs (bar 85%); Spearman 0.210 (bar 0.5)'
    """
    if (
        summary.get("heldout_best_over_random_balanced") is None
        and summary.get("heldout_best_over_worse") is None
    ):
        return "  judge         no held-out positions scored (reward.spearman_positions 0)"
    balanced = summary.get("heldout_best_over_random_balanced")
    worse = summary.get("heldout_best_over_worse")
    rho = summary.get("heldout_spearman")
    return (
        "  judge         best above a random legal move "
        + (
            f"{balanced:.1%} of {int(summary['heldout_balanced_positions'])} balanced positions"
            if balanced is not None
            else "- (no balanced position)"
        )
        + " (bar 80%); above a move 0.1 worse "
        + (
            f"{worse:.1%} of {int(summary['heldout_worse_pairs'])} pairs"
            if worse is not None
            else "- (no such pair)"
        )
        + " (bar 85%); Spearman "
        + (f"{rho:.3f}" if rho is not None else "-")
        + " (bar 0.5)"
    )


def pairwise_accuracy(chosen: Sequence[float], rejected: Sequence[float]) -> float | None:
    """The share of pairs whose chosen score is above the rejected one (a tie counts half).

    >>> pairwise_accuracy([2.0, 1.0, 0.5], [1.0, 3.0, 0.5])
    0.5
    """
    if not chosen:
        return None
    wins = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected, strict=True))
    return wins / len(chosen)


def heldout_board(fen: str, share: int = 20) -> bool:
    """Whether a pair of a table with no train/held-out split is held out: one board in
    ``share``, by a stable hash of the FEN's board, side to move, castling and en passant fields
    (the same board is never on both sides).

    >>> heldout_board("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1") in (True, False)
    True
    """
    import hashlib

    key = " ".join(fen.split()[:4]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % share == 0


def load_reward_model(path: str) -> tuple[Any, Any]:
    """:func:`chessrl.lm.checkpoints.load_reward_model`, named here too for the callers that score with
    this module (imported when called: this module stays free of torch and transformers)."""
    from chessrl.lm.checkpoints import load_reward_model as load

    return load(path)


def build_reward_model(preset: str = "tiny", tokenizer: Any = None) -> tuple[Any, Any]:
    """A randomly initialised GPT-2 reward model of a preset's shape (tests, benches): the
    language model of :func:`chessrl.lm.models.build_model` with a one-label score head.

    >>> model, tok = build_reward_model()
    >>> model.config.num_labels, model.config.pad_token_id == tok.pad_token_id
    (1, True)
    """
    from transformers import GPT2ForSequenceClassification

    from chessrl.lm.models import build_model

    lm, tok = build_model(preset, tokenizer)
    config = lm.config
    config.num_labels = 1
    model = GPT2ForSequenceClassification(config)
    model.transformer.load_state_dict(lm.transformer.state_dict())
    return model.eval(), tok


#: A Ruy Lopez, for example queries.
EXAMPLE_GAME: tuple[str, ...] = tuple(
    [
        "e2e4",
        "e7e5",
        "g1f3",
        "b8c6",
        "f1b5",
        "a7a6",
        "b5a4",
        "g8f6",
        "e1g1",
        "f8e7",
        "f1e1",
        "b7b5",
        "a4b3",
        "d7d6",
        "c2c3",
        "e8g8",
        "h2h3",
        "c6a5",
    ]
)


def example_queries(n: int, game: Sequence[str] = EXAMPLE_GAME) -> list[RewardQuery]:
    """``n`` legal queries (tests, benches): every legal move after every prefix of ``game``,
    repeated as needed.

    >>> qs = example_queries(25)
    >>> len(qs), qs[0], qs[20].moves
    (25, RewardQuery(moves=(), move='a2a3', fen=None), ('e2e4',))
    """
    out = []
    board = chess.Board()
    for i, uci in enumerate(game):
        out += [RewardQuery(tuple(game[:i]), move) for move in sorted(m.uci() for m in board.legal_moves)]
        board.push_uci(uci)
    return (out * (n // len(out) + 1))[:n]
