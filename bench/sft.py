"""sft bench: training tokens/s of the ``sft`` phase (Ray Train + TRL, 1 worker) / a plain PyTorch loop.

    python bench/sft.py                               # tiny preset, batch 16 x 256 tokens, 3 runs each
    python bench/sft.py --model small --steps 30 --runs 5 --json /tmp/sft.json

Both sides train the same model preset on the same packed blocks (the repository's real games,
tokenised and packed by the same code), with the same batch size, sequence length, optimizer
(AdamW, weight decay 0.01, betas 0.9/0.95, gradient clipping 1.0), loss (cross-entropy plus the
legal-move loss at the phase's default weight 1.0: ``--legal-loss-weight``), torch threads (2) and
precision: bf16 autocast where the phase's ``precision: auto`` picks it (a CPU with AMX or
AVX512-BF16), fp32 elsewhere; ``--precision`` sets both sides, and ``--torch-compile`` compiles
both (the phase's ``--torch-compile``; the untimed first step pays the compiling).

- Baseline: a plain loop in this process: forward, backward, clip, step, on batches cut from
  the packed blocks.
- Measured: ``pipelines.sft.main`` (a TorchTrainer of one worker running TRL's SFTTrainer on the
  Ray Data shard) on an embedded local Ray of 2 CPUs started once; a fresh run name per run so
  nothing resumes; one held-out evaluation and one checkpoint, both after the timed steps.
  Its rate is the phase's own ``train_tokens_per_s`` (tokens of steps 2..N over their wall time).

Both time steps 2..N (the first step pays one-off costs on both sides). Runs alternate B, M,
B, M, ... so machine noise hits both. The last line is ``sft ratio: X.XX (target >= 0.85)``,
X = median(measured tokens/s) / median(baseline tokens/s); a JSON record goes to ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import torch
from machine_load import fmt_load, timed
from record import RESULTS, ROOT, write_record

from chessrl.lm.legality import MoveTokens, lm_and_legal_loss, pad_legal_targets
from chessrl.lm.lm_data import split_games, training_text
from chessrl.lm.models import build_model, resolve_bf16
from cluster.config import RaySection
from cluster.runtime import ray_session
from pipelines.sft_data import tokenize_and_pack

TARGET = 0.85
NUM_CPUS = 2
OBJECT_STORE_GB = 2
THREADS = 2
PGN = ROOT / "tests" / "data" / "pgn"


def prepare_games(workdir: Path) -> Path:
    """The repository's real games as a games Parquet (the ``prepare`` phase, no generation)."""
    from pipelines import prepare

    code = prepare.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(workdir),
            "--run-name",
            "bench",
            "--no-tracking",
            "--generate",
            "0",
            "--inputs",
            str(PGN),
        ]
    )
    if code != 0:
        raise SystemExit(f"prepare failed with exit code {code}")
    return workdir / "bench" / "prepare" / "games"


def packed_blocks(
    games: Path, tokenizer: Any, block: int
) -> tuple[torch.Tensor, torch.Tensor, list[Any], Any]:
    """The training games as the sft phase packs them: whole ``<bos> game <eos>`` sequences in
    blocks padded to ``block``; returns (input ids, labels with the padding not a target, and
    each block's legal-move targets: flat ids and counts)."""
    rows = pads.dataset(games, format="parquet").to_table(columns=["game_id", "moves", "result"]).to_pylist()
    train, _, _ = split_games(rows, 0.05)  # the phase's split: each game once
    texts = [training_text(r["moves"], r["result"]) for r in train]
    # the phase's own Ray Data stage
    packed = tokenize_and_pack({"text": texts}, tokenizer, block, legal=MoveTokens(tokenizer))
    inputs = torch.as_tensor(packed["input_ids"], dtype=torch.long)
    padding = torch.arange(block) >= torch.as_tensor(packed["length"])[:, None]
    labels = inputs.masked_fill(padding, -100)
    return inputs, labels, list(packed["legal_moves"]), packed["legal_counts"]


def baseline_run(
    preset: str,
    blocks: tuple[torch.Tensor, torch.Tensor, list[Any], Any],
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    bf16: bool,
    compile_model: bool = False,
    legal_weight: float = 0.0,
) -> dict[str, Any]:
    """A plain PyTorch loop: tokens/s of steps 2..N."""
    torch.set_num_threads(THREADS)
    model, _ = build_model(preset)
    model.train()
    forward = torch.compile(model) if compile_model else model
    loss_fn = torch.compile(lm_and_legal_loss, dynamic=False) if compile_model else lm_and_legal_loss
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    inputs, labels, legal_flat, legal_counts = blocks
    order = torch.randperm(len(inputs), generator=gen)
    started = None
    for step in range(steps):
        idx = order[(torch.arange(batch) + step * batch) % len(inputs)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if legal_weight:  # the phase's objective: the legal moves of each position, padded per batch
                rows = idx.tolist()
                legal = pad_legal_targets([legal_flat[r] for r in rows], legal_counts[rows], multiple=32)
                logits = forward(input_ids=inputs[idx]).logits
                loss = loss_fn(logits, labels[idx], torch.from_numpy(legal), legal_weight)[0]
            else:
                loss = forward(input_ids=inputs[idx], labels=labels[idx]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step == 0:
            started = time.perf_counter()
    assert started is not None
    seconds = time.perf_counter() - started
    tokens = (steps - 1) * batch * inputs.shape[1]
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "loss": float(loss)}


def measured_run(
    preset: str,
    workdir: Path,
    steps: int,
    batch: int,
    length: int,
    lr: float,
    i: int,
    precision: str,
    compile_model: bool = False,
    legal_weight: float = 0.0,
) -> dict[str, Any]:
    """``pipelines.sft.main`` with one worker; its own steady-state tokens/s."""
    from pipelines import sft

    run = f"bench-sft-{i}"
    started = time.perf_counter()
    code = sft.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(workdir),
            "--run-name",
            run,
            "--no-tracking",
            "--games",
            str(workdir / "bench" / "prepare" / "games"),
            "--model",
            preset,
            "--max-steps",
            str(steps),
            "--eval-every",
            str(steps),
            "--batch-size",
            str(batch),
            "--max-length",
            str(length),
            "--learning-rate",
            str(lr),
            "--num-workers",
            "1",
            "--precision",
            precision,
            "--legal-loss-weight",
            str(legal_weight),
            "--set",
            "sft.heldout_positions=1",
        ]
        + (["--torch-compile", "always"] if compile_model else ["--torch-compile", "never"])
    )
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"sft failed with exit code {code}")
    summary = json.loads((workdir / run / "sft" / "summary.json").read_text())
    rate = float(summary["train_tokens_per_s"])
    return {
        "tokens": (steps - 1) * batch * length,
        "tokens_per_s": rate,
        "phase_seconds": wall,
        "loss": summary["loss"],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``python bench/sft.py --help``); ``--steps`` below 2 is a usage error.

    >>> args = parse_args(["--steps", "5", "--runs", "1"])
    >>> args.model, args.steps, args.runs, args.precision
    ('tiny', 5, 1, 'auto')
    """
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny", choices=["tiny", "small", "base"])
    parser.add_argument(
        "--steps", type=int, default=40, help="optimizer steps per run (steps 2..N are timed)"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="both sides: auto is the phase's default (bf16 on a CPU with AMX or AVX512-BF16)",
    )
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="both sides: torch.compile the model (the phase's --torch-compile); step 1 compiles, untimed",
    )
    parser.add_argument(
        "--legal-loss-weight",
        type=float,
        default=1.0,
        help="both sides: cross-entropy + this x the legal-move loss (the phase's default for the chess "
        "tokenizer is 1.0; 0: cross-entropy only)",
    )
    parser.add_argument("--json", default=str(RESULTS / "sft.json"))
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is not timed)")
    return args


def run_pairs(args: argparse.Namespace, bf16: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(baseline runs, measured runs)``: the repository's games prepared and packed once on an
    embedded local Ray, then ``args.runs`` pairs, baseline then phase, each printed as it ends.

        baseline, measured = run_pairs(parse_args(["--steps", "3", "--runs", "1"]), bf16=False)
    """
    baseline: list[dict[str, Any]] = []
    measured: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        ray_info = stack.enter_context(
            ray_session(RaySection(num_cpus=NUM_CPUS, object_store_gb=OBJECT_STORE_GB))
        )
        print(f"local Ray: {ray_info.resources.get('CPU', 0):.0f} CPUs; preparing the repository's games ...")
        games = prepare_games(workdir)
        _, tokenizer = build_model(args.model)
        blocks = packed_blocks(games, tokenizer, args.max_length)
        print(
            f"{len(blocks[0]):,} blocks of {args.max_length} tokens; model {args.model}, batch {args.batch_size}, "
            f"{args.steps} steps per run, {THREADS} torch threads, {'bf16 autocast' if bf16 else 'fp32'}"
            + (", torch.compile" if args.torch_compile else "")
            + (
                f", legal-move loss x {args.legal_loss_weight:g}"
                if args.legal_loss_weight
                else ", cross-entropy only"
            )
        )
        for i in range(args.runs):
            b = timed(
                baseline_run,
                args.model,
                blocks,
                args.steps,
                args.batch_size,
                args.learning_rate,
                i,
                bf16,
                args.torch_compile,
                args.legal_loss_weight,
            )
            baseline.append(b)
            print(
                f"  run {i + 1} baseline  {b['tokens_per_s']:9,.0f} tokens/s  (loss {b['loss']:.3f}; "
                f"other load {fmt_load(b['other_load_cores'])})"
            )
            # no "other load" here: the Train worker's CPU time leaves with its process, so it
            # would be counted as other processes' load
            m = timed(
                measured_run,
                args.model,
                workdir,
                args.steps,
                args.batch_size,
                args.max_length,
                args.learning_rate,
                i,
                "bf16" if bf16 else "fp32",
                args.torch_compile,
                args.legal_loss_weight,
            )
            measured.append(m)
            print(
                f"  run {i + 1} sft       {m['tokens_per_s']:9,.0f} tokens/s  (loss {m['loss']:.3f}; "
                f"phase {m['phase_seconds']:.1f} s end to end)"
            )
    return baseline, measured


def ratio_record(
    args: argparse.Namespace, bf16: bool, baseline: list[dict[str, Any]], measured: list[dict[str, Any]]
) -> dict[str, Any]:
    """The JSON record of the runs: settings, every run, the medians and their ratio against
    :data:`TARGET` (``record["ratio"]``, ``record["passed"]``)."""
    base_med = statistics.median(r["tokens_per_s"] for r in baseline)
    meas_med = statistics.median(r["tokens_per_s"] for r in measured)
    ratio = meas_med / base_med if base_med else 0.0
    print(f"median baseline {base_med:,.0f} tokens/s; median sft {meas_med:,.0f} tokens/s")
    return {
        "bench": "sft",
        "ratio_definition": "median train tokens/s of the sft phase (1 worker, Ray Train + TRL) / "
        "median tokens/s of a plain PyTorch loop, same model, batch, length, optimizer, threads, precision",
        "model": args.model,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "steps": args.steps,
        "precision": "bf16" if bf16 else "fp32",
        "torch_compile": args.torch_compile,
        "legal_loss_weight": args.legal_loss_weight,
        "runs": {"baseline": baseline, "sft": measured},
        "medians": {"baseline_tokens_per_s": base_med, "sft_tokens_per_s": meas_med},
        "ratio": ratio,
        "target": TARGET,
        "passed": ratio >= TARGET,
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run the pairs, write the record and print the ratio line (its last)."""
    args = parse_args(argv)
    bf16 = resolve_bf16(args.precision, on_gpu=False)
    baseline, measured = run_pairs(args, bf16)
    record = ratio_record(args, bf16, baseline, measured)
    write_record(args.json, record)
    print(f"sft ratio: {record['ratio']:.2f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
