"""Bench: pairs/s of the ``preferences`` phase on this machine ÷ a plain single-process loop
(python-chess ``SimpleEngine`` + one ``generate`` per position) on the same positions, model,
k, temperature and node limit. Median of ``--runs`` runs of each side, the ratio on the last line.

    .venv/bin/python bench/preferences.py                       # the demo model if it exists
    .venv/bin/python bench/preferences.py --policy runs/demo/sft/model --positions 256 --runs 3

The baseline does what the phase does, one position at a time, as a user would write it: the
policy proposes ``k`` moves (one ``model.generate`` call with ``num_return_sequences=k``,
:func:`chessrl.lm.models.propose_moves`), Stockfish finds its move from an empty
hash, each distinct legal proposal is scored by a search of the position after it, and the same
pair rule and invalid-share cap apply. Both sides make the same pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from record import RESULTS, ROOT, write_record


def plain_loop(
    positions,
    model,
    tokenizer,
    k: int,
    temperature: float,
    nodes: int,
    margin: int,
    share: float,
    shard: int,
    seed: int,
) -> tuple[int, float]:  # type: ignore[no-untyped-def]  # noqa: E501
    """Pairs made and seconds, one position at a time in this process."""
    import chess
    import chess.engine
    import torch

    from chessrl.arena.suites import score_cp
    from chessrl.engine.client import find_stockfish
    from chessrl.lm.models import propose_moves
    from chessrl.rl.preferences import PairRule, cap_invalid_share, make_pairs

    rule = PairRule(margin_cp=margin)
    started = time.perf_counter()
    engine = chess.engine.SimpleEngine.popen_uci(find_stockfish())
    engine.configure({"Threads": 1, "Hash": 16})
    limit = chess.engine.Limit(nodes=nodes)
    made = 0
    try:
        for start in range(0, len(positions), shard):
            rows = []
            for j, position in enumerate(positions[start : start + shard]):
                torch.manual_seed(seed + start + j)
                proposals = propose_moves(model, tokenizer, position.prompt, n=k, temperature=temperature)
                board = chess.Board(position.fen)
                info = engine.analyse(board, limit, game=object())
                if "pv" not in info or not info["pv"]:
                    continue
                best = info["pv"][0].uci()
                scores = {}
                for word in dict.fromkeys((c.split() or [""])[0] for c in proposals):
                    try:
                        move = chess.Move.from_uci(word)
                    except ValueError:
                        continue
                    if move in board.legal_moves and word != best:
                        after = board.copy(stack=False)
                        after.push(move)
                        child = engine.analyse(after, limit, game=object())
                        scores[word] = -score_cp(_score(child["score"], after.turn))
                got, _ = make_pairs(
                    position, best, score_cp(_score(info["score"], board.turn)), proposals, scores, rule
                )
                rows.extend(got)
            kept, _ = cap_invalid_share(rows, share, seed + start)
            made += len(kept)
    finally:
        engine.quit()
    return made, time.perf_counter() - started


def _score(pov, turn):  # type: ignore[no-untyped-def]
    from chessrl.engine.client import Score

    return Score.from_pov(pov, None, turn)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's flags, checked (``--positions``, ``--k``, ``--nodes``, ``--runs`` at least 1)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--policy",
        default=None,
        help="a saved model folder [default: runs/demo/sft/model, else a tiny model trained for 80 steps]",
    )
    parser.add_argument(
        "--positions", type=int, default=768, help="training positions per run [default: 768]"
    )
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=str(RESULTS / "preferences.json"))
    args = parser.parse_args(argv)
    if min(args.positions, args.k, args.nodes, args.runs) < 1:
        parser.error("--positions, --k, --nodes and --runs must be >= 1")
    return args


def _prepare_argv(work: Path) -> list[str]:
    """The ``prepare`` run that writes the bench's games table (the Firouzja sample) under ``work``."""
    return [
        "--config",
        "tiny",
        "--storage",
        str(work),
        "--run-name",
        "g",
        "--no-tracking",
        "--generate",
        "0",
        "--inputs",
        str(ROOT / "tests/data/pgn/masters/Firouzja.pgn.zst"),
    ]


def _phase_argv(args: argparse.Namespace, storage: Path, games: Path, policy: str) -> list[str]:
    """The ``preferences`` run on ``games`` with the plain loop's settings and pair rule."""
    return [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "b",
        "--no-tracking",
        "--games",
        str(games),
        "--policy",
        policy,
        "--positions",
        str(args.positions),
        "--heldout-positions",
        "0",
        "--k",
        str(args.k),
        "--temperature",
        str(args.temperature),
        "--nodes",
        str(args.nodes),
        # the plain loop's pair rule: Stockfish's move against the proposals only
        "--no-ranked-pairs",
        "--random-moves",
        "0",
        "--shard-positions",
        "128",
    ]


def _report(
    args: argparse.Namespace, phase_rates: list[float], plain_rates: list[float], positions: int, policy: str
) -> int:
    """The JSON record and the ratio line of the medians; 1 (no ratio) when the plain loop made no pairs."""
    phase, plain = statistics.median(phase_rates), statistics.median(plain_rates)
    if plain == 0:
        print("the plain loop made no pairs, so there is no ratio: raise --positions or --k", file=sys.stderr)
        return 1
    ratio = phase / plain
    write_record(
        args.json,
        {
            "bench": "preferences",
            "ratio": ratio,
            "phase_pairs_per_s": phase_rates,
            "plain_pairs_per_s": plain_rates,
            "positions": positions,
            "k": args.k,
            "nodes": args.nodes,
            "policy": policy,
            "target": 1.5,
        },
    )
    print(
        f"preferences ratio (phase pairs/s / plain loop pairs/s, median of {args.runs}): {ratio:.2f} (target >= 1.5)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)

    from chessrl.lm.checkpoints import load_pretrained
    from cluster.config import RaySection
    from cluster.runtime import ray_session
    from cluster.storage import Storage
    from pipelines import preferences, prepare
    from pipelines.common.artifacts import read_games
    from pipelines.config import ChessRLConfig
    from pipelines.preferences import plan_positions

    with (
        tempfile.TemporaryDirectory(prefix="bench-preferences-") as tmp,
        ray_session(RaySection(object_store_gb=1)),
    ):
        work = Path(tmp)
        if prepare.main(_prepare_argv(work)) != 0:
            return 1
        games = work / "g" / "prepare" / "games"
        policy = pick_policy(args.policy, games, work / "policy")
        model, tokenizer = load_pretrained(policy)
        model.eval()
        cfg = ChessRLConfig().preferences.model_copy(
            update={"positions": args.positions, "heldout_positions": 0}
        )
        train, _ = plan_positions(read_games(Storage.from_uri(str(games))), cfg, 0.05, 7)
        print(
            f"positions: {len(train)} from {games}; policy {policy}; k={args.k}, T={args.temperature}, {args.nodes:,} nodes"
        )
        print(f"machine: {os.cpu_count()} CPU(s), {platform.processor() or platform.machine()}")
        phase_rates, plain_rates = [], []
        for run in range(args.runs):
            made, seconds = plain_loop(
                train,
                model,
                tokenizer,
                args.k,
                args.temperature,
                args.nodes,
                cfg.margin_cp,
                cfg.max_invalid_share,
                cfg.shard_positions,
                7,
            )
            plain_rates.append(made / seconds)
            storage = work / f"phase-{run}"
            code = preferences.main(_phase_argv(args, storage, games, policy))
            if code != 0:
                return code
            summary = json.loads((storage / "b" / "preferences" / "summary.json").read_text())
            phase_rates.append(summary["pairs_per_s"])
            print(
                f"run {run + 1}: phase {phase_rates[-1]:.1f} pairs/s ({summary['made_now']} pairs), plain loop {plain_rates[-1]:.1f} pairs/s ({made} pairs)"
            )
    return _report(args, phase_rates, plain_rates, len(train), policy)


def pick_policy(given: str | None, games: Path, folder: Path) -> str:
    """``--policy`` if given, else the demo's sft model if there is one, else a tiny one trained here."""
    if given:
        return given
    demo = ROOT / "runs/demo/sft/model"
    return str(demo) if (demo / "config.json").is_file() else str(train_tiny(games, folder))


def train_tiny(games: Path, folder: Path) -> Path:
    """A tiny GPT-2 trained for 80 steps on the games (so proposals are sometimes legal)."""
    import pyarrow.dataset as pads

    from chessrl.lm.models import quick_policy

    texts = [
        r["moves"] for r in pads.dataset(str(games), format="parquet").to_table(columns=["moves"]).to_pylist()
    ]
    model, tok = quick_policy(texts)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    sys.exit(main())
