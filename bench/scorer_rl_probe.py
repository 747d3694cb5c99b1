"""scorer_rl_probe bench: does a scorer policy (:class:`chessrl.rl.scorer_policy.ScorerPolicy`, the
judge's shape as a policy) get better by policy gradient against a learned judge? Not a speed: the
question the seed's path (sft -> judge -> RL against the judge) asks, in one process, no Ray,
before the RL phases learn to train such a policy.

Each step takes ``--batch`` positions of annotate's training table (its game, random-mover and
lopsided sources) and, for each, the policy's log-probability of every legal move (with grad:
one forward pass, the board read once) and the reward of every legal move: the judge's normalised
score (``--reward judge``, the seed's path) or the table's own margin value (``--reward table``:
Stockfish's, for scale). The loss is ``-E_pi[r] + beta KL(pi || pi_start)``, both exact over the
legal moves (one ply deep: nothing to sample). Before and after, on the table's held-out positions
(unseen games): how often the policy's best move is annotate's best, the regret on the margin scale,
and how often it is the judge's best. The final policy is saved as a reward-model folder, so

    python bench/scorer_rl_probe.py --start runs/s11/reward/ray/s11-reward/checkpoint_.../checkpoint \\
        --judge runs/s11/reward/model --annotate runs/s11/annotate --steps 300 --out /tmp/scorer-rl
    chess-rl evaluate --players judge:/tmp/scorer-rl judge:<start> --sprt ...   # games decide

plays it through ``evaluate --players judge:DIR`` (its argmax over the legal moves).
"""

from __future__ import annotations

import argparse
import glob
import random
import statistics
import time
from typing import Any

import chess
import pyarrow.parquet as pq
import torch
from record import RESULTS, write_record

from chessrl.engine.move_value import annotated_values
from chessrl.rl.reward import score_ids
from chessrl.rl.scorer_policy import ScorerPolicy, move_rows


def table(folder: str, split: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(glob.glob(f"{folder}/{split}/*.parquet")):
        cols = ["fen", "source", "moves", "cp", "expected", "best_move", "terminal"]
        rows += [r for r in pq.read_table(path, columns=cols).to_pylist() if not r["terminal"] and r["moves"]]
    return rows


def load(folder: str) -> tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    return AutoModelForSequenceClassification.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def judged(judge: Any, tok: Any, board: chess.Board, moves: list[str]) -> list[float]:
    """The judge's normalised score of each move (its config's mean and std, as ppo reads it)."""
    mean = float(getattr(judge.config, "chessrl_reward_mean", 0.0))
    std = float(getattr(judge.config, "chessrl_reward_std", 1.0)) or 1.0
    raw = score_ids(judge, move_rows(tok, judge.config, board, moves), int(tok.pad_token_id))
    return [(s - mean) / std for s in raw]


def measure(policy: ScorerPolicy, judge: Any, jtok: Any, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Top-1 against annotate's best, regret on the margin scale, agreement with the judge's best."""
    top1, regret, agree = [], [], []
    for r in rows:
        board = chess.Board(r["fen"])
        values = dict(zip(r["moves"], annotated_values(r["cp"], r["expected"]), strict=True))
        best = policy.best(board)
        moves = sorted(values)
        jscores = judged(judge, jtok, board, moves)
        top1.append(float(best == r["best_move"]))
        regret.append(max(values.values()) - values.get(best, min(values.values())))
        agree.append(float(best == moves[max(range(len(moves)), key=lambda i: (jscores[i], -i))]))
    return {
        "top1": statistics.mean(top1),
        "regret": statistics.mean(regret),
        "judge_agree": statistics.mean(agree),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--start", required=True, help="the policy to start from: a reward-model folder")
    parser.add_argument("--judge", required=True, help="the judge: a reward-model folder (`chess-rl reward`)")
    parser.add_argument("--annotate", required=True, help="annotate's folder (train/ and heldout/)")
    parser.add_argument("--reward", choices=["judge", "table"], default="judge")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=8, help="positions a step")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.05, help="KL to the start")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--heldout", type=int, default=200, help="held-out positions measured")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="where the final policy is saved")
    parser.add_argument("--json", default=str(RESULTS / "scorer_rl_probe.json"))
    return parser.parse_args(argv)


def train_against(
    args: argparse.Namespace,
    policy: ScorerPolicy,
    reference: ScorerPolicy,
    judge: Any,
    jtok: Any,
    train: list[dict[str, Any]],
    rng: random.Random,
) -> None:
    """``--steps`` steps of ``-E_pi[r] + beta KL(pi || pi_start)``, exact over each position's legal moves."""
    model = policy.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    model.train()
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        losses, kls, gains = [], [], []
        optimizer.zero_grad()
        for r in rng.sample(train, args.batch):
            board = chess.Board(r["fen"])
            moves, logp = policy.log_probs(board)
            with torch.no_grad():
                _, ref = reference.log_probs(board)
                if args.reward == "judge":
                    reward = torch.tensor(judged(judge, jtok, board, moves))
                else:
                    values = dict(zip(r["moves"], annotated_values(r["cp"], r["expected"]), strict=True))
                    reward = torch.tensor([values[m] for m in moves]) * 10  # ~ the judge's spread
            p = logp.exp()
            gain = (p * reward).sum()
            kl = (p * (logp - ref)).sum()
            loss = (-gain + args.beta * kl) / args.batch
            loss.backward()
            losses.append(loss.item() * args.batch)
            kls.append(kl.item())
            gains.append((gain - (ref.exp() * reward).sum()).item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 25 == 0 or step == args.steps:
            print(
                f"step {step}/{args.steps}: loss {statistics.mean(losses):+.3f}, KL {statistics.mean(kls):.3f}, "
                f"E[r] over start {statistics.mean(gains):+.3f}, {(time.perf_counter() - started) / step:.2f} s a step",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    model, tok = load(args.start)
    start, _ = load(args.start)
    judge, jtok = load(args.judge)
    for m in (start, judge):
        m.eval().requires_grad_(False)
    policy = ScorerPolicy(model, tok, args.temperature)
    reference = ScorerPolicy(start, tok, args.temperature)
    train, held = table(args.annotate, "train"), table(args.annotate, "heldout")
    held = rng.sample(held, min(args.heldout, len(held)))
    before = measure(policy, judge, jtok, held)
    itself = measure(ScorerPolicy(judge, jtok), judge, jtok, held)
    print(f"start: {before}\njudge itself: {itself}", flush=True)

    started = time.perf_counter()
    train_against(args, policy, reference, judge, jtok, train, rng)
    model.eval()
    after = measure(policy, judge, jtok, held)
    print(f"final: {after}")
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    write_record(
        args.json,
        {
            "bench": "scorer_rl_probe",
            **{k: v for k, v in vars(args).items() if k != "json"},
            "before": before,
            "after": after,
            "judge_itself": itself,
            "seconds": time.perf_counter() - started,
        },
    )
    print(
        f"saved {args.out}; top-1 {before['top1']:.3f} -> {after['top1']:.3f}, regret {before['regret']:.3f} -> {after['regret']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
