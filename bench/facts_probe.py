"""facts_probe bench: does a tiny GPT-2 learn to pick the move a position's text favours? One
process, no Ray: annotate's table in, a few hundred steps of distillation (the margin scale's
soft targets over the legal moves, a legality term), and every ``--eval-every`` steps:

- top-1 and regret (margin value lost against annotate's best, masked argmax) on the table's
  held-out positions (unseen games) and on 500 random-mover and lopsided positions kept out of
  training ("chaos": where the facts decide the move), beside a hand rule reading the facts;
- the same for a per-move head (``--aux``): a linear score of each listed move's hidden state,
  trained listwise on the same targets (a readout that points instead of copying);
- 16 games against a random mover (masked argmax, 200 plies, material adjudication).

    python bench/facts_probe.py --annotate runs/tiny/annotate --steps 400
    python bench/facts_probe.py --annotate runs/tiny/annotate --layout grouped --sinus 0.05
    python bench/facts_probe.py --annotate runs/tiny/annotate --layout ordered-last --arch llama

``--layout``: ``facts`` (:class:`chessrl.lm.formats.FactsFormat`), ``grouped`` (the same facts,
the moves grouped by them: `` [p#] h5f7 [p+] c4f7 ... [.] a2a4``), ``board``. ``--sinus`` starts
GPT-2's learnt position table from sinusoids of that scale. Figures: docs/results.md ("Three
more probes of the facts policy").
"""

from __future__ import annotations

import argparse
import glob
import math
import random
import time
from collections.abc import Iterator
from typing import Any

import chess
import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

from chessrl.data.positions import PIECE_VALUES
from chessrl.engine.move_value import annotated_values
from chessrl.lm.formats import control, get_format, move_facts
from chessrl.lm.legality import soft_targets
from chessrl.lm.models import build_model
from chessrl.lm.tokenizer import build_chess_tokenizer

Example = tuple[list[int], list[int], np.ndarray, list[int]]  # ids, legal move ids, values, move positions


def prompt(board: chess.Board, layout: str) -> str:
    """The position's text in ``layout``."""
    if layout in ("ordered", "ordered-last"):
        text = get_format("board").policy_prompt(board)[: -len(" M:")]
        moves = sorted(board.legal_moves, key=chess.Move.uci)
        moves.sort(key=lambda m: -facts_score(move_facts(board, m)))
        if layout == "ordered-last":
            moves.reverse()
        listed = "".join(f" [{f}] {m.uci()}" if (f := move_facts(board, m)) else f" {m.uci()}" for m in moves)
        return f"{text[:64]} {control(board)}{text[64:]}{listed} M:"
    if layout != "grouped":
        return get_format(layout).policy_prompt(board)
    text = get_format("board").policy_prompt(board)[: -len(" M:")]
    groups: dict[str, list[str]] = {}
    for move in sorted(board.legal_moves, key=chess.Move.uci):
        groups.setdefault(move_facts(board, move), []).append(move.uci())
    listed = "".join(
        (f" [{f}]" if f else " [.]") + "".join(" " + m for m in groups[f])
        for f in sorted(groups, key=lambda f: (f == "", f))
    )
    return f"{text[:64]} {control(board)}{text[64:]}{listed} M:"


VALUES = {s: PIECE_VALUES[chess.Piece.from_symbol(s).piece_type] for s in "pnbrqPNBRQ"}


def facts_score(facts: str) -> float:
    """A mate first, else the biggest capture less half a point where the piece can be taken."""
    return 100 * ("#" in facts) + sum(VALUES.get(c, 0) for c in facts) - 0.5 * ("-" in facts)


def hand_rule(fen: str, moves: list[str]) -> int:
    """The move a rule reading the facts picks (:func:`facts_score`'s best)."""
    board = chess.Board(fen)
    return max(range(len(moves)), key=lambda i: facts_score(move_facts(board, chess.Move.from_uci(moves[i]))))


def read_rows(pattern: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(glob.glob(pattern)):
        rows += pq.read_table(path, columns=["fen", "moves", "cp", "expected", "source"]).to_pylist()
    random.Random(1).shuffle(rows)
    return [r for r in rows if r["moves"]]


def encode(rows: list[dict[str, Any]], tok: Any, layout: str) -> list[Example]:
    out = []
    for r in rows:
        ids = tok(prompt(chess.Board(r["fen"]), layout))["input_ids"]
        legal = [tok.convert_tokens_to_ids(" " + m) for m in r["moves"]]
        where = {t: i for i, t in enumerate(ids)}
        values = np.array(annotated_values(r["cp"], r["expected"], "margin"), dtype=np.float32)
        out.append((ids, legal, values, [where.get(t, len(ids) - 1) for t in legal]))
    return out


def tiny_llama(tok: Any, seed: int) -> Any:
    """The tiny preset's shape (4 layers, 4 heads, 192 wide) as a Llama: rotary positions (relative,
    where GPT-2's are learnt absolute ones), tied embeddings, the move embeddings composed as
    :func:`chessrl.lm.models.compose_move_embeddings` does for GPT-2."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from chessrl.lm.models import compose_move_embeddings

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    compose_move_embeddings(model, tok, seed=seed)
    return model


class Probe:
    """The model, its per-move head and the forward pass over a batch of examples."""

    def __init__(self, args: argparse.Namespace, tok: Any) -> None:
        torch.manual_seed(args.seed)
        self.args, self.tok = args, tok
        self.model = (
            build_model("tiny", seed=args.seed)[0] if args.arch == "gpt2" else tiny_llama(tok, args.seed)
        )
        self.head = torch.nn.Linear(self.model.get_input_embeddings().weight.shape[1], 1)
        if args.sinus:
            n, d = self.model.config.n_positions, self.model.config.n_embd
            pos = torch.arange(n).float()[:, None]
            freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2).float() / d)
            table = torch.zeros(n, d)
            table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
            with torch.no_grad():
                self.model.transformer.wpe.weight.copy_(table * args.sinus)
        params = list(self.model.parameters()) + list(self.head.parameters())
        self.opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)

    def forward(self, batch: list[Example]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The answer's logits (left-padded: the last token is the answer's) and each example's
        per-move scores."""
        width = max(len(e[0]) for e in batch)
        ids = torch.full((len(batch), width), self.tok.pad_token_id)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, e in enumerate(batch):
            ids[i, width - len(e[0]) :], mask[i, width - len(e[0]) :] = torch.tensor(e[0]), 1
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                output_hidden_states=True,
            )
            hidden = out.hidden_states[-2]
            scores = [
                self.head(hidden[i, torch.tensor([width - len(e[0]) + p for p in e[3]], dtype=torch.long)])
                .float()
                .squeeze(-1)
                for i, e in enumerate(batch)
            ]
        return out.logits[:, -1].float(), scores

    def step(self, batch: list[Example], lr: float) -> float:
        for group in self.opt.param_groups:
            group["lr"] = lr
        logits, scores = self.forward(batch)
        logp = F.log_softmax(logits, -1)
        loss = torch.zeros(())
        for row, (_, legal, values, _) in enumerate(batch):
            target = torch.from_numpy(soft_targets(values, self.args.temperature))
            loss = loss - (target * logp[row, legal]).sum() - self.args.legal * logp[row, legal].mean()
            if self.args.aux:
                loss = loss - self.args.aux * (target * F.log_softmax(scores[row], -1)).sum()
        loss = loss / len(batch)
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return float(loss.detach())

    def measure(self, examples: list[Example]) -> dict[str, float]:
        """Top-1 and regret of the masked answer and of the per-move head; the answer's legal rate."""
        self.model.eval()
        top1 = regret = head_top1 = head_regret = legal_rate = 0.0
        with torch.no_grad():
            for i in range(0, len(examples), 50):
                chunk = examples[i : i + 50]
                logits, scores = self.forward(chunk)
                for row, s, (_, legal, values, _) in zip(logits, scores, chunk, strict=True):
                    legal_rate += int(row.argmax()) in legal
                    k, h = int(row[legal].argmax()), int(s.argmax())
                    top1, regret = (
                        top1 + (values[k] >= values.max() - 1e-6),
                        regret + float(values.max() - values[k]),
                    )
                    head_top1 += values[h] >= values.max() - 1e-6
                    head_regret += float(values.max() - values[h])
        self.model.train()
        n = max(1, len(examples))
        return {
            "legal": legal_rate / n,
            "top1": top1 / n,
            "regret": regret / n,
            "head_top1": head_top1 / n,
            "head_regret": head_regret / n,
        }

    def against_random(self, games: int = 16) -> float:
        """The masked argmax's score against a random mover (material adjudication at 200 plies)."""
        self.model.eval()
        rng, score = random.Random(5), 0.0
        with torch.no_grad():
            for game in range(games):
                board, me = chess.Board(), game % 2 == 0
                while not board.is_game_over(claim_draw=True) and board.ply() < 200:
                    legal = list(board.legal_moves)
                    if board.turn == me:
                        ids = torch.tensor([self.tok(prompt(board, self.args.layout))["input_ids"]])
                        logits = self.model(input_ids=ids).logits[0, -1]
                        board.push(
                            max(
                                legal,
                                key=lambda m: float(logits[self.tok.convert_tokens_to_ids(" " + m.uci())]),
                            )
                        )
                    else:
                        board.push(rng.choice(legal))
                score += game_score(board, me)
        self.model.train()
        return score / games


def game_score(board: chess.Board, me: chess.Color) -> float:
    outcome = board.outcome(claim_draw=True)
    if outcome is not None:
        return 0.5 if outcome.winner is None else float(outcome.winner == me)
    sides = sum(PIECE_VALUES[p.piece_type] * (1 if p.color == me else -1) for p in board.piece_map().values())
    return 1.0 if sides >= 3 else 0.0 if sides <= -3 else 0.5


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--annotate", required=True, help="annotate's output folder (train/ and heldout/ Parquet)"
    )
    ap.add_argument(
        "--layout", choices=["facts", "grouped", "ordered", "ordered-last", "board"], default="facts"
    )
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--temperature", type=float, default=0.03)
    ap.add_argument("--legal", type=float, default=0.5, help="weight of the legality term")
    ap.add_argument("--aux", type=float, default=0.0, help="weight of the per-move head's listwise loss")
    ap.add_argument(
        "--sinus", type=float, default=0.0, help="start the position table from sinusoids of this scale"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--arch",
        choices=["gpt2", "llama"],
        default="gpt2",
        help="the tiny shape as GPT-2 or as a Llama (rotary)",
    )
    args = ap.parse_args()
    tok = build_chess_tokenizer()
    rows = read_rows(f"{args.annotate}/train/*.parquet")
    chaos_rows = [r for r in rows if r["source"] in ("random", "lopsided", "engine")][
        : min(500, len(rows) // 5)
    ]
    kept = {id(r) for r in chaos_rows}
    held_rows = read_rows(f"{args.annotate}/heldout/*.parquet")[:500]
    for name, part in (("held-out", held_rows), ("chaos", chaos_rows)):
        picks = [hand_rule(r["fen"], r["moves"]) for r in part]
        values = [annotated_values(r["cp"], r["expected"], "margin") for r in part]
        lost = [max(v) - v[k] for v, k in zip(values, picks, strict=True)]
        print(
            f"hand rule on {name}: top-1 {np.mean([x < 1e-6 for x in lost]):.1%}, regret {np.mean(lost):.4f}"
        )
    train = encode([r for r in rows if id(r) not in kept], tok, args.layout)
    if len(train) < args.batch or not held_rows:
        raise SystemExit(
            f"{args.annotate}: {len(train)} training positions, {len(held_rows)} held out: too few"
        )
    held, chaos = encode(held_rows, tok, args.layout), encode(chaos_rows, tok, args.layout)
    probe = Probe(args, tok)
    train_loop(probe, train, held, chaos)


def schedule(n: int, args: argparse.Namespace, rng: random.Random) -> Iterator[tuple[int, list[int], float]]:
    """The probes' steps: ``(step, the batch's indices into n examples, learning rate)``, passes over
    the examples in a shuffled order, ``args.lr`` after 50 warm-up steps and a cosine to zero.

    >>> a = argparse.Namespace(lr=1.0, steps=4, batch=2)
    >>> [(s, len(b), round(lr, 2)) for s, b, lr in schedule(3, a, random.Random(0))]
    [(1, 2, 0.02), (2, 2, 0.03), (3, 2, 0.03), (4, 2, 0.01)]
    """
    step = 0
    while True:
        order = list(range(n))
        rng.shuffle(order)
        for i in range(0, n - args.batch + 1, args.batch):
            lr = args.lr * min(1, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
            step += 1
            yield step, order[i : i + args.batch], lr
            if step >= args.steps:
                return


def train_loop(probe: Probe, train: list[Example], held: list[Example], chaos: list[Example]) -> None:
    args, started = probe.args, time.perf_counter()
    for step, batch, lr in schedule(len(train), args, random.Random(args.seed)):
        loss = probe.step([train[j] for j in batch], lr)
        if step % args.eval_every == 0 or step == args.steps:
            h, c = probe.measure(held), probe.measure(chaos)
            print(
                f"step {step} loss {loss:.3f} ({time.perf_counter() - started:.0f} s): held-out legal {h['legal']:.1%} "
                f"top-1 {h['top1']:.1%} regret {h['regret']:.4f}; chaos top-1 {c['top1']:.1%} regret {c['regret']:.4f}, "
                f"per-move head {c['head_top1']:.1%} regret {c['head_regret']:.4f}; "
                f"vs random {probe.against_random():.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
