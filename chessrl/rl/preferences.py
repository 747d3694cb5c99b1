"""Preference pairs for the reward model, Ray-free: positions from games, the pair rule, the
Parquet schema.

For a position from a real game, Stockfish's best move is *chosen* and a move the policy proposed
is *rejected* when it is worse than Stockfish's by at least ``margin_cp`` centipawns (from the
mover's view, mates capped at :data:`chessrl.arena.suites.CP_CAP`), or when it is not a legal move at
all (kept, marked by ``kind``, their share capped). A proposal equal to Stockfish's move, or
within the margin, makes no such pair; the reasons are counted. With ``PairRule(ranked=True)``,
two legal proposals ``margin_cp`` or more apart also make a pair (``kind: ranked``, the better
one chosen): the reward model then also learns to rank the policy's own moves, not only to tell
them from Stockfish's.

>>> pos = position_from_moves("g1", 3, ("e2e4", "e7e5"), source="train")
>>> pos.phase, pos.fen.split()[1]
('opening', 'w')
>>> rule = PairRule(margin_cp=50)
>>> rows, skipped = make_pairs(pos, best_move="g1f3", best_cp=40,
...                            proposals=["g1f3", "f1c4", "a2a3", "e1e3", "Nf3"],
...                            scores={"f1c4": 30, "a2a3": -20}, rule=rule)
>>> [(r["rejected"], r["kind"], r["rejected_score"]) for r in rows]
[(' a2a3', 'worse', -20), (' e1e3', 'illegal', -1000), (' Nf3', 'unparseable', -1000)]
>>> dict(skipped)
{'agrees': 1, 'within_margin': 1}
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import chess
import pyarrow as pa

from chessrl.arena.suites import CP_CAP
from chessrl.lm.formats import MovesFormat, TextFormat, parse_move

GamePhase = Literal["opening", "middlegame", "endgame"]
PairKind = Literal["worse", "ranked", "random", "illegal", "unparseable"]
PHASES: tuple[GamePhase, ...] = ("opening", "middlegame", "endgame")

#: The preference table: one row a pair. ``prompt`` + ``chosen`` (+ ``rejected``) is the text the
#: reward model reads (the ``moves`` format); scores are centipawns from the mover's view, capped.
PREFERENCE_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("chosen", pa.string()),
        ("rejected", pa.string()),
        ("chosen_score", pa.int32()),
        ("rejected_score", pa.int32()),
        ("fen", pa.string()),
        ("source", pa.string()),  # train | heldout: which side of the games' split the game is on
        ("game_id", pa.string()),
        ("ply", pa.int32()),
        ("phase", pa.string()),
        ("kind", pa.string()),  # worse | ranked | random | illegal | unparseable
    ]
)
REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "chosen", "rejected")
#: Pair kinds whose rejected move is legal.
LEGAL_KINDS: tuple[str, ...] = ("worse", "ranked", "random")


def game_phase(board: chess.Board) -> GamePhase:
    """``endgame`` with fewer than 14 pieces on the board (kings and pawns included), else
    ``opening`` for the first ten moves, else ``middlegame``.

    >>> game_phase(chess.Board()), game_phase(chess.Board("8/8/4k3/8/8/4K3/4P3/8 w - - 0 40"))
    ('opening', 'endgame')
    """
    if len(board.piece_map()) < 14:
        return "endgame"
    return "opening" if board.fullmove_number <= 10 else "middlegame"


@dataclass(frozen=True)
class PrefPosition:
    """A position from a game: the moves before it (the prompt), its FEN and phase."""

    game_id: str
    ply: int
    moves_before: tuple[str, ...]
    fen: str
    phase: GamePhase
    source: str

    @property
    def prompt(self) -> str:
        return MovesFormat().prompt(self.moves_before)

    def completion(self, move: str) -> str:
        """The text after the prompt for ``move`` (its leading space when moves came before)."""
        return MovesFormat().completion(self.moves_before, move)

    def asked(self, fmt: TextFormat) -> str:
        """The prompt that asks a policy of text format ``fmt`` for the move here: the moves so
        far (:attr:`prompt`), or the position itself in a board or RookWorld format. The table's
        ``prompt`` stays the moves so far either way (with ``fen``, any format rebuilds it).

        >>> from chessrl.lm.formats import BoardFormat
        >>> p = position_from_moves("g", 1, ["e2e4"], source="train")
        >>> p.asked(MovesFormat()), p.asked(BoardFormat())[-11:]
        ('e2e4', 'b KQkq - M:')
        """
        return fmt.prompt_for(chess.Board(self.fen), self.moves_before)


def position_from_moves(game_id: str, ply: int, moves: Sequence[str], *, source: str) -> PrefPosition:
    """The position after ``moves[:ply]`` (the moves must be legal: they come from the games table)."""
    board = chess.Board()
    for uci in moves[:ply]:
        board.push_uci(uci)
    return PrefPosition(game_id, ply, tuple(moves[:ply]), board.fen(), game_phase(board), source)


def sample_positions(
    games: Iterable[Mapping[str, Any]], n: int, *, seed: int, source: str, min_ply: int = 0
) -> list[PrefPosition]:
    """``n`` positions where the side to move has a move to make, one per game in a seeded order
    and round after round while games last; ``games`` are rows with ``game_id`` and ``moves``.

    >>> rows = [{"game_id": "a", "moves": "e2e4 e7e5 g1f3"}, {"game_id": "b", "moves": "d2d4 d7d5"}]
    >>> [(p.game_id, p.ply) for p in sample_positions(rows, 3, seed=1, source="train")]
    [('b', 0), ('a', 1), ('b', 1)]
    """
    rng = random.Random(seed)
    pool = [(str(r["game_id"]), str(r["moves"]).split()) for r in games if r.get("moves")]
    pool = [(g, m) for g, m in pool if len(m) > min_ply]
    rng.shuffle(pool)
    taken: dict[str, set[int]] = {}
    out: list[PrefPosition] = []
    while pool and len(out) < n:
        remaining = []
        for game_id, moves in pool:
            if len(out) >= n:
                break
            free = [p for p in range(min_ply, len(moves)) if p not in taken.setdefault(game_id, set())]
            if not free:
                continue
            ply = rng.choice(free)
            taken[game_id].add(ply)
            out.append(position_from_moves(game_id, ply, moves, source=source))
            remaining.append((game_id, moves))
        pool = remaining
    return out


@dataclass(frozen=True)
class PairRule:
    """When a proposal makes a pair."""

    margin_cp: int = 50
    """A legal proposal is rejected when it scores at least this many centipawns below the best."""
    invalid_score: int = -CP_CAP
    """The score written for an illegal or unparseable proposal: the floor, or ``margin_cp`` below
    the best move when that is lower (a lost position), so every pair keeps the margin."""

    ranked: bool = False
    """Also pair the legal proposals among themselves (the better one chosen, ``kind: ranked``)."""

    def __post_init__(self) -> None:
        if self.margin_cp < 0:
            raise ValueError(f"margin_cp must be >= 0, got {self.margin_cp}")


def capped(cp: int) -> int:
    """Centipawns within ±:data:`CP_CAP` (mates are already at the cap)."""
    return max(-CP_CAP, min(CP_CAP, int(cp)))


def make_pairs(
    position: PrefPosition,
    best_move: str,
    best_cp: int,
    proposals: Sequence[str],
    scores: Mapping[str, int],
    rule: PairRule,
    extra: Sequence[str] = (),
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The pairs of one position: ``proposals`` are the policy's completions (first word read as
    a move), ``scores`` the engine's score of each legal proposed move (mover's view). Each
    distinct proposal counts once; returns the rows and the skipped proposals by reason.
    ``extra``: legal moves that are not the policy's (e.g. random ones, scored in ``scores``): they
    pair with Stockfish's move like a proposal (``kind: random``) and join the ranked pairs."""
    board = chess.Board(position.fen)
    rows: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    best = capped(best_cp)
    legal_scores: dict[str, int] = {}
    marked = [(c, False) for c in proposals] + [(m, True) for m in extra]
    for completion, is_extra in marked:
        parsed = parse_move(board, completion)
        word = parsed.text
        if word in seen:
            skipped["duplicate"] += 1
            continue
        seen.add(word)
        if parsed.status == "legal":
            legal_scores[word] = best if word == best_move else capped(scores[word])
            if word == best_move:
                skipped["agrees"] += 1
                continue
            score = capped(scores[word])
            if best - score < rule.margin_cp:
                skipped["within_margin"] += 1
                continue
            kind: PairKind = "random" if is_extra else "worse"
        else:
            kind = parsed.status  # type: ignore[assignment]
            score = min(rule.invalid_score, best - rule.margin_cp)  # below any legal move, and the margin
        rows.append(
            {
                "prompt": position.prompt,
                "chosen": position.completion(best_move),
                "rejected": position.completion(word),
                "chosen_score": best,
                "rejected_score": score,
                "fen": position.fen,
                "source": position.source,
                "game_id": position.game_id,
                "ply": position.ply,
                "phase": position.phase,
                "kind": kind,
            }
        )
    if rule.ranked:
        ordered = sorted(legal_scores.items(), key=lambda kv: (-kv[1], kv[0]))
        for i, (better, high) in enumerate(ordered):
            for worse, low in ordered[i + 1 :]:
                if better == best_move or high - low < rule.margin_cp:
                    continue  # a pair with Stockfish's move is made above
                rows.append(
                    {
                        "prompt": position.prompt,
                        "chosen": position.completion(better),
                        "rejected": position.completion(worse),
                        "chosen_score": high,
                        "rejected_score": low,
                        "fen": position.fen,
                        "source": position.source,
                        "game_id": position.game_id,
                        "ply": position.ply,
                        "phase": position.phase,
                        "kind": "ranked",
                    }
                )
    return rows, skipped


def cap_invalid_share(
    rows: list[dict[str, Any]], share: float, seed: int
) -> tuple[list[dict[str, Any]], int]:
    """At most ``share`` of the rows may be illegal/unparseable pairs: a seeded choice of the
    extras is dropped. Returns the rows kept (in their order) and how many were dropped.

    >>> rows = [{"kind": "worse"}] * 3 + [{"kind": "illegal"}] * 5
    >>> kept, dropped = cap_invalid_share(rows, 0.25, seed=0)
    >>> sum(r["kind"] == "illegal" for r in kept), len(kept), dropped
    (1, 4, 4)
    """
    if not 0 <= share <= 1:
        raise ValueError(f"the invalid share must be in [0, 1], got {share}")
    valid = [i for i, r in enumerate(rows) if r["kind"] in LEGAL_KINDS]
    invalid = [i for i, r in enumerate(rows) if r["kind"] not in LEGAL_KINDS]
    # k invalid rows out of len(valid) + k total: k <= share * (valid + k)  <=>  k <= share*valid/(1-share)
    allowed = len(invalid) if share >= 1 else int(share * len(valid) / (1 - share) + 1e-9)
    if len(invalid) <= allowed:
        return rows, 0
    keep = set(valid) | set(random.Random(seed).sample(invalid, allowed))
    return [r for i, r in enumerate(rows) if i in keep], len(invalid) - allowed


def missing_columns(names: Iterable[str]) -> list[str]:
    """The required preference columns a table lacks (``prompt``, ``chosen``, ``rejected``)."""
    have = set(names)
    return [c for c in REQUIRED_COLUMNS if c not in have]


def board_key(fen: str) -> str:
    """A FEN without its move counters: the same position reached at another move number."""
    return " ".join(fen.split()[:4])


def unique_positions(
    positions: Iterable[PrefPosition], exclude: set[str] | None = None
) -> list[PrefPosition]:
    """The positions whose board (:func:`board_key`) is neither in ``exclude`` nor seen before
    in the list: no pair is made twice, and held-out pairs can exclude every training board.

    >>> a = position_from_moves("a", 0, ("e2e4",), source="train")
    >>> b = position_from_moves("b", 0, ("d2d4",), source="train")
    >>> [p.game_id for p in unique_positions([a, b])], unique_positions([a], exclude={board_key(b.fen)})
    (['a'], [])
    """
    seen = set(exclude or ())
    out = []
    for p in positions:
        key = board_key(p.fen)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def mover_cp_after(child_score: Any) -> int:
    """The mover's score of a move from the engine's score of the position after it (the
    opponent's view, so negated); mates at the cap, "mated now" (the move mates) at +CP_CAP."""
    from chessrl.arena.suites import score_cp

    return -score_cp(child_score)


def annotation_pairs(
    row: Mapping[str, Any], k: int, margin_cp: int, rng: random.Random, split: str = "train"
) -> list[dict[str, Any]]:
    """Up to ``k`` preference pairs (:data:`PREFERENCE_SCHEMA`) from one annotated position (a
    row of ``chessrl.engine.annotation.ANNOTATION_SCHEMA``, every legal move valued): half
    Stockfish's best move against a random legal move at least ``margin_cp`` worse (kind
    ``random``: what a judge must tell apart first), half two random moves ``margin_cp`` or more
    apart, the better one chosen (kind ``ranked``). Distinct pairs only; the position is given by
    its FEN (``prompt`` empty), values capped at :data:`chessrl.arena.suites.CP_CAP`.

    >>> row = {"fen": "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", "moves": ["d1d8", "g1f1", "h2h3"],
    ...        "cp": [99999, 0, -10], "phase": "endgame", "game_id": "g", "ply": 40}
    >>> pairs = annotation_pairs(row, 4, 50, random.Random(0))
    >>> sorted((p["chosen"], p["rejected"], p["kind"]) for p in pairs)
    [(' d1d8', ' g1f1', 'random'), (' d1d8', ' h2h3', 'random')]
    """
    moves, cps = list(row["moves"]), [capped(int(c)) for c in row["cp"]]
    if len(moves) < 2:
        return []
    best = cps[0]
    worse = [i for i in range(1, len(moves)) if best - cps[i] >= margin_cp]
    chosen_rejected: list[tuple[int, int, str]] = []
    for i in rng.sample(worse, min(len(worse), max(1, k // 2))):
        chosen_rejected.append((0, i, "random"))
    apart = [
        (i, j) for i in range(len(moves)) for j in range(i + 1, len(moves)) if cps[i] - cps[j] >= margin_cp
    ]
    seen = {(a, b) for a, b, _ in chosen_rejected}
    for i, j in rng.sample(apart, min(len(apart), k)):
        if len(chosen_rejected) >= k:
            break
        if (i, j) not in seen:
            seen.add((i, j))
            chosen_rejected.append((i, j, "ranked"))
    return [
        {
            "prompt": "",
            "chosen": f" {moves[i]}",
            "rejected": f" {moves[j]}",
            "chosen_score": cps[i],
            "rejected_score": cps[j],
            "fen": row["fen"],
            "source": split,
            "game_id": row.get("game_id"),
            "ply": row.get("ply"),
            "phase": row.get("phase"),
            "kind": kind,
        }
        for i, j, kind in chosen_rejected
    ]
