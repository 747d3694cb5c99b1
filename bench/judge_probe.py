"""judge_probe bench: does a tiny GPT-2 sequence classifier learn to rank a position's moves when the
text it reads puts the rules' facts next to what it judges? One process, no Ray: annotate's table
in, a few hundred steps, then the judge's bar (:func:`chessrl.rl.reward.judge_measures`, Spearman)
on the table's held-out positions of unseen games, scoring every legal move.

The judge is the reward model's shape (:func:`chessrl.rl.reward.build_reward_model`: GPT-2, a
one-label head read at the last token), so plain ``transformers`` runs it. Layouts of the text it
scores (one text a legal move):

- ``board-after``: :class:`chessrl.lm.formats.BoardAfterFormat` (the board after the move, then the
  move), the reward phase's judge format today;
- ``after-control``: the board after the move with each square's control beside its piece (two
  tokens a square, :func:`chessrl.lm.formats.control` from the side now to move: a ``+`` under the
  mover's piece is a piece that hangs), then the move with its facts last (:func:`move_facts`);
- ``before-facts``: the board before the move and its control row, then the move's facts and the
  move last (no copy needed: what is judged is at the readout);
- ``facts``: :meth:`chessrl.lm.formats.FactsFormat.judged_text`, ``before-facts`` plus what the
  move wins less what it leaves hanging and the room it makes (:func:`chessrl.lm.formats.balance`)
  and two digits of what it leaves hanging and what it then threatens, each a static exchange
  (:func:`chessrl.lm.formats.consequences`): the reward phase's ``--text-format facts``.

Losses: ``listwise`` (softmax over a position's sampled moves against the margin scale's soft
targets), ``mse`` (the margin value itself), or both.

    python bench/judge_probe.py --annotate runs/tiny/annotate --layout after-control --steps 600
    python bench/judge_probe.py --annotate runs/tiny/annotate --heldout 300 --rule   # the hand rule, for scale
"""

from __future__ import annotations

import argparse
import glob
import random
import time
from typing import Any

import chess
import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from facts_probe import schedule

from chessrl.engine.move_value import annotated_values
from chessrl.lm.formats import (
    BoardAfterFormat,
    BoardFormat,
    FactsFormat,
    balance,
    control,
    move_facts,
    outlook,
)
from chessrl.lm.legality import soft_targets
from chessrl.lm.models import right_padded
from chessrl.rl.reward import build_reward_model, judge_measures, mean_spearman

LAYOUTS = ("board-after", "after-control", "before-facts", "facts")


def judged_text(board: chess.Board, move: chess.Move, layout: str) -> str:
    """The text the judge scores for ``move`` in ``board``, in ``layout``."""
    if layout == "board-after":
        return BoardAfterFormat().judged_text(board, move.uci())
    if layout == "facts":
        return FactsFormat().judged_text(board, move.uci())
    facts = move_facts(board, move)
    tail = f" [{facts}] {move.uci()}" if facts else f" . {move.uci()}"
    if layout == "before-facts":
        text = BoardFormat().policy_prompt(board)[: -len(" M:")]
        return f"{text[:64]} {control(board)}{text[64:]}{tail}"
    after = board.copy(stack=False)
    after.push(move)
    text = BoardFormat().policy_prompt(after)[: -len(" M:")]
    squares = "".join(p + c for p, c in zip(text[:64], control(after), strict=True))
    return f"{squares}{text[64:]}{tail}"


Position = tuple[list[list[int]], np.ndarray, list[int]]  # each move's ids, margin values, cps


def encode(rows: list[dict[str, Any]], tok: Any, layout: str) -> list[Position]:
    out = []
    for r in rows:
        board = chess.Board(r["fen"])
        ids = [
            [*tok(judged_text(board, chess.Move.from_uci(m), layout))["input_ids"], tok.eos_token_id]
            for m in r["moves"]
        ]
        values = np.array(annotated_values(r["cp"], r["expected"], "margin"), dtype=np.float32)
        out.append((ids, values, [int(c) for c in r["cp"]]))
    return out


def read_rows(pattern: str, limit: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(glob.glob(pattern)):
        rows += pq.read_table(path, columns=["fen", "moves", "cp", "expected", "source"]).to_pylist()
    random.Random(1).shuffle(rows)
    return [r for r in rows if r["moves"] and len(r["moves"]) >= 2][:limit]


def scores(model: Any, rows: list[list[int]], pad_id: int) -> torch.Tensor:
    ids, mask = right_padded(rows, pad_id, model.device)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model(input_ids=ids, attention_mask=mask).logits[:, 0].float()


def step(model: Any, opt: Any, batch: list[Position], args: argparse.Namespace, rng: random.Random) -> float:
    """One update over ``batch``: each position's best move and ``--moves - 1`` others at random."""
    rows, groups = [], []
    for ids, values, _ in batch:
        best = int(values.argmax())
        others = [i for i in range(len(ids)) if i != best]
        pick = [best, *rng.sample(others, min(len(others), args.moves - 1))]
        groups.append((len(rows), len(pick), torch.from_numpy(values[pick])))
        rows += [ids[i] for i in pick]
    out = scores(model, rows, model.config.pad_token_id)
    loss = torch.zeros(())
    for start, n, values in groups:
        s = out[start : start + n]
        if args.loss in ("listwise", "both"):
            target = torch.from_numpy(soft_targets(values.numpy(), args.temperature))
            loss = loss - (target * F.log_softmax(s / args.temperature, -1)).sum()
        if args.loss in ("mse", "both"):
            loss = loss + F.mse_loss(s, (values - 0.5) * 4, reduction="sum") / n
    loss = loss / len(groups)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def hand_rule(board: chess.Board, move: chess.Move) -> float:
    """The rule that reads the ``facts`` judge's own text, for scale: a mate first, else what the
    move wins net (:func:`chessrl.lm.formats.balance`'s gain), a tenth of what it then threatens,
    0.05 for a check and a hundredth of the room digit."""
    after = board.copy(stack=False)
    after.push(move)
    if after.is_checkmate():
        return 100.0
    _, threat, gain, _ = outlook(board, move)
    return gain + threat / 10 + (0.05 if after.is_check() else 0.0) + int(balance(board, move)[2]) / 100


def measure_rule(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The judge's bar of :func:`hand_rule` on ``rows`` (annotate's held-out rows)."""
    groups = []
    for r in rows:
        board = chess.Board(r["fen"])
        groups.append(
            ([hand_rule(board, chess.Move.from_uci(m)) for m in r["moves"]], [int(c) for c in r["cp"]])
        )
    rho, _ = mean_spearman(groups)
    return {**judge_measures(groups), "spearman": float("nan") if rho is None else rho}


def measure(model: Any, positions: list[Position]) -> dict[str, float]:
    """The judge's bar on ``positions``, every legal move scored."""
    model.eval()
    groups = []
    with torch.no_grad():
        for ids, _, cps in positions:
            groups.append(([float(x) for x in scores(model, ids, model.config.pad_token_id)], cps))
    model.train()
    rho, _ = mean_spearman(groups)
    return {**judge_measures(groups), "spearman": float("nan") if rho is None else rho}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--annotate", required=True, help="annotate's output folder (train/ and heldout/)")
    ap.add_argument("--layout", choices=LAYOUTS, default="after-control")
    ap.add_argument("--loss", choices=["listwise", "mse", "both"], default="both")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16, help="positions a step")
    ap.add_argument("--moves", type=int, default=4, help="moves a position a step (the best first)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--temperature", type=float, default=0.05)
    ap.add_argument("--train", type=int, default=20_000, help="training positions at most")
    ap.add_argument("--heldout", type=int, default=200, help="held-out positions scored")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rule", action="store_true", help="score the held-out positions with hand_rule, train nothing"
    )
    args = ap.parse_args()
    if args.rule:
        print(f"hand rule: {measure_rule(read_rows(f'{args.annotate}/heldout/*.parquet', args.heldout))}")
        return
    torch.manual_seed(args.seed)
    model, tok = build_reward_model("tiny")
    model.train()
    started = time.perf_counter()
    train = encode(read_rows(f"{args.annotate}/train/*.parquet", args.train), tok, args.layout)
    held = encode(read_rows(f"{args.annotate}/heldout/*.parquet", args.heldout), tok, args.layout)
    if len(train) < args.batch or not held:
        raise SystemExit(f"{args.annotate}: {len(train)} training positions, {len(held)} held out")
    print(
        f"{len(train)} training, {len(held)} held-out positions encoded in {time.perf_counter() - started:.0f} s"
    )
    print(f"step 0: {measure(model, held)}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng, started = random.Random(args.seed), time.perf_counter()
    for done, batch, lr in schedule(len(train), args, rng):  # the one rng: shuffles, then picks moves
        for group in opt.param_groups:
            group["lr"] = lr
        loss = step(model, opt, [train[j] for j in batch], args, rng)
        if done % args.eval_every == 0 or done == args.steps:
            m = measure(model, held)
            print(
                f"step {done} loss {loss:.3f} ({time.perf_counter() - started:.0f} s): "
                f"best > random (balanced) {m['best_over_random_balanced']:.1%} "
                f"of {m['balanced_positions']:.0f}, best > 0.1 worse {m['best_over_worse']:.1%} "
                f"of {m['worse_pairs']:.0f}, Spearman {m['spearman']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
