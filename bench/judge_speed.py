"""Bench: a judge scoring every legal move of a position, each position's shared beginning read
once (:func:`chessrl.lm.shared_prefix.classify_rows`) ÷ every row read whole (the same rows, the
same process, the same batch size), median of ``--runs`` runs of each; the ratio on the last line.

    .venv/bin/python bench/judge_speed.py                          # an untrained tiny facts judge
    .venv/bin/python bench/judge_speed.py --model runs/s11/reward/model --positions 40

Positions are the ones of real games (``tests/data/pgn/masters``), one every ``--every`` plies.
The largest difference between the two ways' scores is printed too: they must agree to float
rounding (a judge's argmax must not change with the speed-up).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from typing import Any

from record import RESULTS, ROOT, write_record


def positions(count: int, every: int) -> list[Any]:
    """``count`` positions of the masters games, one every ``every`` plies, none finished."""
    import io

    import chess.pgn

    from chessrl.data.pgn import open_pgn

    out: list[Any] = []
    for path in sorted((ROOT / "tests" / "data" / "pgn" / "masters").glob("*.pgn*")):
        with path.open("rb") as raw:
            handle = io.StringIO(open_pgn(raw, path.name).read().decode("utf-8", "replace"))
            while len(out) < count and (game := chess.pgn.read_game(handle)) is not None:
                board = game.board()
                for ply, move in enumerate(game.mainline_moves(), 1):
                    board.push(move)
                    if ply % every == 0 and not board.is_game_over() and len(out) < count:
                        out.append(board.copy())
        if len(out) >= count:
            break
    return out


def judge(model_dir: str | None) -> tuple[Any, Any]:
    if model_dir:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        return AutoModelForSequenceClassification.from_pretrained(
            model_dir
        ).eval(), AutoTokenizer.from_pretrained(model_dir)
    from chessrl.rl.reward import TEXT_FORMAT_KEY, build_reward_model

    model, tok = build_reward_model("tiny")
    setattr(model.config, TEXT_FORMAT_KEY, "facts")
    return model, tok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="a reward model folder [default: an untrained tiny facts judge]")
    parser.add_argument("--positions", type=int, default=24)
    parser.add_argument("--every", type=int, default=7, help="a position every this many plies")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads [default: 1, a server's]")
    parser.add_argument("--json", default=str(RESULTS / "judge_speed.json"))
    args = parser.parse_args(argv)
    if min(args.positions, args.every, args.runs, args.threads) < 1:
        parser.error("--positions, --every, --runs and --threads must be >= 1")

    import torch

    from chessrl.lm.shared_prefix import classify_rows
    from chessrl.rl.reward import RewardQuery, query_ids, reward_format

    torch.set_num_threads(args.threads)
    model, tok = judge(args.model)
    fmt = reward_format(model.config)
    pad = int(tok.pad_token_id)
    groups = []
    for board in positions(args.positions, args.every):
        fen = board.fen()
        rows = [query_ids(tok, RewardQuery((), m.uci(), fen), fmt, board) for m in board.legal_moves]
        groups.append(rows)
    moves = sum(len(g) for g in groups)
    tokens = sum(len(r) for g in groups for r in g)

    def score(min_prefix: int) -> tuple[float, list[float]]:
        started = time.perf_counter()
        out = [s for rows in groups for s in classify_rows(model, rows, pad, min_prefix=min_prefix)]
        return moves / (time.perf_counter() - started), out

    score(10**9)  # warm up
    whole, shared, gap = [], [], 0.0
    for run in range(args.runs):
        w, a = score(10**9)
        s, b = score(16)
        whole.append(w)
        shared.append(s)
        gap = max(gap, max(abs(x - y) for x, y in zip(a, b, strict=True)))
        print(f"run {run + 1}: shared prefix {s:.0f} moves/s, whole rows {w:.0f} moves/s")
    ratio = statistics.median(shared) / statistics.median(whole)
    print(
        f"{len(groups)} positions, {moves} legal moves, {tokens / moves:.0f} tokens a move, "
        f"format {fmt.name or 'moves'}, {args.threads} thread(s), {platform.processor() or platform.machine()}; "
        f"largest score difference {gap:.2e}"
    )
    write_record(
        args.json,
        {
            "bench": "judge_speed",
            "model": args.model or "untrained tiny facts judge",
            "positions": len(groups),
            "moves": moves,
            "threads": args.threads,
            "shared_moves_per_s": statistics.median(shared),
            "whole_moves_per_s": statistics.median(whole),
            "largest_difference": gap,
            "ratio": ratio,
        },
    )
    print(f"ratio (shared prefix ÷ whole rows, moves/s, medians of {args.runs}): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
