"""value_scale bench: which grade scale tells a player what wins. A one-ply player that plays the
move of the highest value on a scale (:mod:`chessrl.engine.move_value`; Stockfish's score of each
position after a legal move at ``--nodes``) against a uniformly random mover, per scale.

    python bench/value_scale.py                          # 40 games a scale, 200 nodes, 200 plies
    python bench/value_scale.py --games 100 --json /tmp/value_scale.json

What it measures is the grade itself, not a model: a learner that followed the grade perfectly
one move deep would play like this. ``expected`` (the project's grade until now) is flat once a
game is won (every move that keeps the win is ~1.0) and blind to repetitions (Stockfish is given
a FEN); ``margin`` keeps ranking by material and mate distance and knows the rules. Ties go to the
first move in UCI order (the deterministic argmax a greedy policy is). Games end by the rules,
claims included (threefold, fifty moves: a draw), or at ``--max-plies`` as a draw: no
adjudication. The last line is ``value_scale: margin X% vs expected Y% against a random mover``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from typing import Any

import chess
from record import RESULTS, write_record

from chessrl.engine.client import SearchLimit, find_stockfish
from chessrl.engine.group import EngineGroup
from chessrl.engine.move_value import VALUE_SCALES, move_value


def greedy_move(board: chess.Board, engines: EngineGroup, limit: SearchLimit, scale: str) -> str:
    """The legal move of the highest value on ``scale`` (the first in UCI order among ties)."""
    moves = sorted(board.legal_moves, key=chess.Move.uci)
    afters = []
    for move in moves:
        board.push(move)
        afters.append(board.copy())
        board.pop()
    open_fens = [b.fen() for b in afters if not b.is_game_over()]
    scores = {a.fen: a.lines[0].score for a in engines.analyse(open_fens, limit) if a.lines}
    values = [move_value(b, scores.get(b.fen()), scale) for b in afters]  # type: ignore[arg-type]
    return moves[max(range(len(moves)), key=lambda i: (values[i], -i))].uci()


def play(
    scale: str, engines: EngineGroup, limit: SearchLimit, white: bool, seed: int, max_plies: int
) -> tuple[float, str]:
    """One game of the greedy player (``white`` or not) against a random mover: its score, how it ended."""
    rng = random.Random(seed)
    board = chess.Board()
    while not board.is_game_over(claim_draw=True) and board.ply() < max_plies:
        if board.turn == (chess.WHITE if white else chess.BLACK):
            board.push_uci(greedy_move(board, engines, limit, scale))
        else:
            board.push(rng.choice(sorted(board.legal_moves, key=chess.Move.uci)))
    outcome = board.outcome(claim_draw=True)
    if outcome is None:
        return 0.5, "ply cap"
    if outcome.winner is None:
        return 0.5, outcome.termination.name.lower()
    return (
        1.0 if outcome.winner == (chess.WHITE if white else chess.BLACK) else 0.0
    ), outcome.termination.name.lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--max-plies", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--json", default=str(RESULTS / "value_scale.json"))
    args = parser.parse_args()
    limit = SearchLimit(nodes=args.nodes)
    record: dict[str, Any] = {
        "games": args.games,
        "nodes": args.nodes,
        "max_plies": args.max_plies,
        "scales": {},
    }
    with EngineGroup(args.engines, path=find_stockfish(), cache_size=0) as engines:
        for scale in VALUE_SCALES:
            started = time.perf_counter()
            results = [
                play(scale, engines, limit, g % 2 == 0, args.seed + g, args.max_plies)
                for g in range(args.games)
            ]
            scores = [s for s, _ in results]
            endings = Counter(e for _, e in results)
            mean = statistics.fmean(scores)
            record["scales"][scale] = {
                "score": mean,
                "endings": dict(endings),
                "seconds": time.perf_counter() - started,
            }
            wins = sum(s == 1.0 for s in scores)
            print(
                f"{scale:>8}: {mean:.1%} (+{wins} ={sum(s == 0.5 for s in scores)} -{sum(s == 0.0 for s in scores)}); "
                f"endings {dict(endings)}; {record['scales'][scale]['seconds']:.0f} s",
                flush=True,
            )
    write_record(args.json, record)
    m, e = record["scales"]["margin"]["score"], record["scales"]["expected"]["score"]
    print(f"value_scale: margin {m:.1%} vs expected {e:.1%} against a random mover ({args.games} games each)")


if __name__ == "__main__":
    main()
