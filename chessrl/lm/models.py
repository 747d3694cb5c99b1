"""GPT-2-style chess language models: presets built from config, and a policy that plays legal
moves through any Hugging Face tokenizer (loading a saved one: :mod:`chessrl.lm.checkpoints`).

>>> model, tok = build_model("tiny")
>>> round(count_parameters(model) / 1e6, 1)
2.6
>>> game = play_game(model, tok, max_plies=6, seed=1)   # an untrained model: fallbacks fill in
>>> len(game.moves) == 6 and all(isinstance(m, str) for m in game.moves)
True

Weights are never downloaded at run time: a preset starts from random weights.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerBase

from chessrl.lm.checkpoints import checkpoint_config
from chessrl.lm.formats import MoveCounts, MovesFormat, ParsedMove, RookWorldFormat
from chessrl.lm.gelu import fuse_gelu as fuse_gelu  # re-exported: its home before it moved
from chessrl.lm.tokenizer import build_chess_tokenizer, start_token

#: GPT-2 shapes. With the chess tokenizer: tiny ≈ 2.6M parameters (CPU), small ≈ 28M (one GPU),
#: base ≈ 89M (GPT-2 124M's shape; 124M with its 50k-token vocabulary).
PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 4, "n_head": 4, "n_embd": 192, "n_positions": 512},
    "small": {"n_layer": 8, "n_head": 8, "n_embd": 512, "n_positions": 1024},
    "base": {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024},
}


def build_model(
    preset: str, tokenizer: PreTrainedTokenizerBase | None = None, seed: int = 0
) -> tuple[GPT2LMHeadModel, Any]:
    """A randomly initialised GPT-2 of the preset's shape, sized to ``tokenizer`` (default: chess),
    its weights drawn from ``seed`` (sft passes the run's seed, so two seeds are two starts).

    >>> a, _ = build_model("tiny", seed=1)
    >>> b, _ = build_model("tiny", seed=1)
    >>> c, _ = build_model("tiny", seed=2)
    >>> bool(torch.equal(a.lm_head.weight, b.lm_head.weight)), bool(torch.equal(a.lm_head.weight, c.lm_head.weight))
    (True, False)
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; presets: {', '.join(PRESETS)}")
    tok = tokenizer if tokenizer is not None else build_chess_tokenizer(PRESETS[preset]["n_positions"])
    config = GPT2Config(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        # No dropout (nanoGPT's pretraining choice): a preset trains for an epoch or two of its
        # games, where dropout buys nothing, and on a CPU its random masks cost ~25% of a step.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **PRESETS[preset],
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    compose_move_embeddings(model, tok, seed=seed)
    return model, tok


#: Config keys that hold a dropout probability, across the architectures transformers ships.
_DROPOUT_KEYS = (
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
    "summary_first_dropout",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "hidden_dropout",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
)


def set_dropout(model: torch.nn.Module, p: float) -> int:
    """Set every dropout of ``model`` to ``p``: its ``nn.Dropout`` modules now, and its config's
    dropout keys so a saved copy keeps it. Works for any architecture; returns the modules set.

    >>> model, _ = build_model("tiny")
    >>> set_dropout(model, 0.1), model.config.resid_pdrop
    (13, 0.1)
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    modules = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    for module in modules:
        module.p = p
    for key in _DROPOUT_KEYS:
        if isinstance(getattr(model.config, key, None), float):
            setattr(model.config, key, p)
    return len(modules)


def cpu_has_bf16_matmul(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (x86 AMX or AVX512-BF16, Arm BF16):
    where it does, bf16 autocast trains a preset ~1.5x faster than fp32; where it does not, bf16
    is emulated and slower. Reads the flags in ``/proc/cpuinfo`` (Linux); elsewhere answers False."""
    try:
        flags = set(Path(cpuinfo).read_text().split())
    except OSError:
        return False
    return bool(flags & {"amx_bf16", "avx512_bf16", "bf16"})


def resolve_bf16(precision: str, on_gpu: bool) -> bool:
    """Whether training runs under bf16 autocast for ``precision`` (auto, fp32, bf16): auto picks
    bf16 on a GPU that has it and on a CPU that multiplies bf16 in hardware.

    >>> resolve_bf16("fp32", on_gpu=True), resolve_bf16("bf16", on_gpu=False)
    (False, True)
    """
    if precision != "auto":
        return precision == "bf16"
    return torch.cuda.is_bf16_supported() if on_gpu else cpu_has_bf16_matmul()


#: Below this many steps, ``torch_compile: auto`` does not compile: compiling costs 20-40 s at the
#: first step and saves ~0.1 s a step (tiny, 16 x 256, 2 CPUs), so short runs would lose time.
COMPILE_MIN_STEPS = 500


def resolve_compile(setting: str, max_steps: int, compiler: str | None = None) -> bool:
    """Whether sft compiles the model with ``torch.compile`` for ``setting`` (auto, always, never).

    auto compiles a run of at least :data:`COMPILE_MIN_STEPS` steps when a C++ compiler is on the
    PATH (inductor builds its kernels with it; ``compiler`` overrides the lookup in tests).

    >>> resolve_compile("auto", 1000, compiler="/usr/bin/g++"), resolve_compile("auto", 1000, compiler="")
    (True, False)
    >>> resolve_compile("auto", 10, compiler="/usr/bin/g++"), resolve_compile("always", 10, compiler="")
    (False, True)
    """
    if setting != "auto":
        return setting == "always"
    if max_steps < COMPILE_MIN_STEPS:
        return False
    if compiler is None:
        names = [os.environ["CXX"]] if os.environ.get("CXX") else []
        compiler = next(filter(None, map(shutil.which, [*names, "g++", "clang++", "c++"])), "")
    return bool(compiler)


def compose_move_embeddings(model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> int:
    """Start every move token's embedding as the sum of a from-square, a to-square and a
    promotion vector (random, GPT-2's init scale), so moves that share squares start out alike.

    A one-token-per-move vocabulary hides that ``e2e4`` and ``e2e3`` move the same piece; with
    composed starting points (in the tied output layer too) what the model learns about one move
    carries over to the moves sharing its squares. Only the starting point changes: the model is
    a plain GPT-2 and every embedding trains freely. Returns how many tokens were set.

    >>> model, tok = build_model("tiny")
    >>> e = model.get_input_embeddings().weight
    >>> a, b, c = (e[tok.convert_tokens_to_ids(t)] for t in (" e2e4", " e2e3", " g1f3"))
    >>> bool(torch.cosine_similarity(a, b, dim=0) > 0.3 > torch.cosine_similarity(a, c, dim=0))
    True
    """
    width = model.get_input_embeddings().weight.shape[1]  # any architecture's, not only GPT-2's
    std = model.config.initializer_range / (2**0.5)
    generator = torch.Generator().manual_seed(seed)
    squares = torch.randn(2, 64, width, generator=generator) * std  # from, to
    promotions = torch.randn(5, width, generator=generator) * std  # none, q, r, b, n
    promotion_row = {None: 0, chess.QUEEN: 1, chess.ROOK: 2, chess.BISHOP: 3, chess.KNIGHT: 4}
    weight = model.get_input_embeddings().weight
    done = 0
    with torch.no_grad():
        for token, index in tokenizer.get_vocab().items():
            text = token.strip().replace("\u0120", "")
            if not 4 <= len(text) <= 5 or index >= weight.shape[0]:
                continue
            try:
                move = chess.Move.from_uci(text)
            except ValueError:
                continue
            if not move:  # "0000", the null move
                continue
            weight[index] = (
                squares[0, move.from_square]
                + squares[1, move.to_square]
                + promotions[promotion_row[move.promotion]]
            )
            done += 1
    return done


def quick_policy(texts: list[str], steps: int = 80, seed: int = 0) -> tuple[GPT2LMHeadModel, Any]:
    """A tiny GPT-2 trained for ``steps`` plain PyTorch steps (16 games of at most 96 tokens each)
    on ``moves`` texts: for tests and benches that need a policy which proposes a legal move now
    and then (an untrained one almost never does), in seconds on a CPU."""
    model, tok = build_model("tiny")
    rows = [tok(t)["input_ids"][:96] for t in texts[:800]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = [rows[i] for i in torch.randint(len(rows), (16,), generator=generator).tolist()]
        width = max(len(r) for r in batch)
        ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in batch])
        labels = torch.tensor([r + [-100] * (width - len(r)) for r in batch])
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval(), tok


def count_parameters(model: torch.nn.Module) -> int:
    """Trainable parameters, counting tied weights once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())


def context_length(preset: str | None, base_model: str | None = None) -> int:
    """The most tokens the model reads at once: the preset's ``n_positions``, or the saved config's.

    >>> context_length("tiny")
    512
    """
    if base_model:
        config = checkpoint_config(base_model)
        return int(config.get("n_positions") or config.get("max_position_embeddings") or 1024)
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[preset]["n_positions"]


# ---------------------------------------------------------------------------------------------
# playing


def right_padded(
    rows: Sequence[Sequence[int]], pad_id: int, device: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``rows`` right-padded to the longest, ``(B, width)``.

    >>> ids, mask = right_padded([[5, 6, 7], [8]], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]])
    """
    width = max(len(r) for r in rows)
    ids = torch.tensor([list(r) + [pad_id] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    return ids, mask


def prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """``tokenizer(text)``: BOS (or EOS for GPT-2-style tokenizers) then the text without its
    trailing whitespace, the start every training text has. A saved model's tokenizer does this
    by itself (:func:`chessrl.lm.tokenizer.add_prompt_start`), so plain ``transformers`` code gets
    the same ids; a tokenizer built without it gets the start token added here.

    >>> tok = build_chess_tokenizer()
    >>> prompt_ids(tok, "e2e4 ") == prompt_ids(tok, "e2e4") == [tok.bos_token_id, 381]
    True
    """
    ids = list(tokenizer(text.rstrip())["input_ids"])
    token = start_token(tokenizer)
    start = tokenizer.convert_tokens_to_ids(token) if token is not None else None
    if start is not None and (not ids or ids[0] != start):
        ids.insert(0, start)
    return ids


@torch.no_grad()
def propose_moves(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    *,
    n: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int | None = None,
) -> list[str]:
    """``n`` completions of ``prompt`` (greedy when temperature is 0), each long enough for a
    move: 2 tokens with the chess tokenizer (a move is one token), 8 with another tokenizer."""
    if max_new_tokens is None:
        max_new_tokens = move_tokens(tokenizer)
    ids = torch.tensor([prompt_ids(tokenizer, prompt)], device=model.device)
    sample = temperature > 0
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=sample,
        temperature=temperature if sample else None,
        top_k=0 if sample else None,
        num_return_sequences=n if sample else 1,
        pad_token_id=model.config.pad_token_id
        if model.config.pad_token_id is not None
        else tokenizer.eos_token_id,
    )
    return [tokenizer.decode(seq[ids.shape[1] :], skip_special_tokens=True) for seq in out]


def move_tokens(tokenizer: PreTrainedTokenizerBase) -> int:
    """New tokens a completion needs for one move: 2 with the chess tokenizer (a move is one
    token), 8 with another tokenizer (a BPE spells a move in pieces)."""
    return 2 if tokenizer.convert_tokens_to_ids(" e2e4") not in (None, tokenizer.unk_token_id) else 8


@torch.no_grad()
def propose_moves_batch(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    n: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int | None = None,
) -> list[list[str]]:
    """``n`` completions for every prompt, batched: one forward pass over all the (left-padded)
    prompts, ``n`` first tokens drawn from each prompt's last logits, then the cache repeated ``n``
    times for the few tokens after (a move is one token with the chess tokenizer). Greedy when
    ``temperature`` is 0 (the same completion ``n`` times), else sampled at ``temperature``.
    Prompts are run shortest to longest in batches of similar length, so little is padding.

    Unlike ``generate(num_return_sequences=n)``, the prompt is read once, not ``n`` times: for
    short completions of long prompts that is most of the work.

    >>> model, tok = build_model("tiny")
    >>> out = propose_moves_batch(model, tok, ["e2e4", "", "d2d4 d7d5"], n=2, temperature=1.0)
    >>> len(out), [len(c) for c in out]
    (3, [2, 2, 2])
    """
    if not prompts:
        return []
    steps = max_new_tokens or move_tokens(tokenizer)
    rows = [prompt_ids(tokenizer, p) for p in prompts]
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out: list[list[str]] = [[] for _ in prompts]
    budget = 16_384  # prompt tokens per forward pass (padding included)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end + 1 - start) * len(rows[order[end]]) <= budget:
            end += 1
        batch = [order[i] for i in range(start, end)]
        seqs = complete_ids(model, tokenizer, [rows[i] for i in batch], n, temperature, steps)
        texts = tokenizer.batch_decode(seqs, skip_special_tokens=True)
        for k, i in enumerate(batch):
            out[i] = texts[k * n : (k + 1) * n]
        start = end
    return out


@torch.no_grad()
def complete_ids(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[list[int]],
    n: int,
    temperature: float,
    steps: int,
) -> torch.Tensor:
    """``n`` completions of at most ``steps`` tokens for each tokenised prompt of ``rows``, as
    token ids ``(len(rows) * n, <= steps)``, prompt-major (the ``n`` of the first prompt first).
    The prompts are left-padded and read once; the cache is repeated ``n`` times for the tokens
    after the first. After an EOS a row holds only padding, and generation stops early once
    every row has ended. Greedy when ``temperature`` is 0."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=model.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=model.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each prompt counts from 0

    def pick(logits: torch.Tensor, count: int) -> torch.Tensor:  # (B, V) -> (B, count)
        if temperature <= 0:
            return logits.argmax(-1, keepdim=True).expand(-1, count)
        return torch.multinomial(torch.softmax(logits.float() / temperature, -1), count, replacement=True)

    result = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    tokens = [pick(result.logits[:, -1, :], n).reshape(-1)]  # (B*n,), n per prompt, in order
    ended = tokens[0] == eos if eos is not None else torch.zeros_like(tokens[0], dtype=torch.bool)
    if steps > 1 and not bool(ended.all()):
        cache = result.past_key_values
        cache.batch_repeat_interleave(n)
        mask = mask.repeat_interleave(n, 0)
        last = positions[:, -1:].repeat_interleave(n, 0)
        for step in range(1, steps):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            result = model(
                input_ids=tokens[-1][:, None],
                attention_mask=mask,
                position_ids=last + step,
                past_key_values=cache,
                use_cache=True,
            )
            cache = result.past_key_values
            tokens.append(pick(result.logits[:, -1, :], 1).reshape(-1))
            if eos is not None:
                ended = ended | (tokens[-1] == eos)
                if bool(ended.all()):
                    break
    seqs = torch.stack(tokens, 1)  # (B*n, <= steps)
    if eos is not None:  # as generate: after an EOS, only padding
        after = (seqs == eos).cumsum(1) - (seqs == eos).long() > 0
        seqs = seqs.masked_fill(after, pad)
    return seqs


@dataclass
class PlayedGame:
    """A game the model played against itself; illegal attempts and fallbacks are counted."""

    moves: list[str] = field(default_factory=list)
    attempts: MoveCounts = field(default_factory=MoveCounts)
    fallbacks: int = 0
    result: str = "*"


def lm_move(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    board: chess.Board,
    moves: list[str],
    *,
    fmt: MovesFormat | RookWorldFormat | None = None,
    temperature: float = 0.0,
    retries: int = 3,
    counts: MoveCounts | None = None,
    rng: random.Random | None = None,
) -> tuple[str, bool]:
    """The model's move: greedy first, then up to ``retries`` samples; else a random legal move.
    ``fmt`` asks in the format the model learned (moves by default; rookworld: ``P: <FEN> M:``).

    Returns ``(move, fell_back)``. Every attempt is counted in ``counts``.
    """
    fmt = fmt or MovesFormat()
    prompt = fmt.prompt_for(board, moves)
    tries: list[float] = [temperature] + [max(temperature, 1.0)] * retries
    for t in tries:
        for completion in propose_moves(model, tokenizer, prompt, temperature=t):
            parsed: ParsedMove = fmt.parse(board, completion)
            if counts is not None:
                counts.add(parsed)
            if parsed.move is not None:
                return parsed.move, False
    legal = sorted(m.uci() for m in board.legal_moves)
    return (rng or random.Random(0)).choice(legal), True


def play_game(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_plies: int = 200,
    temperature: float = 0.0,
    retries: int = 3,
    seed: int = 0,
) -> PlayedGame:
    """The model against itself from the start position; every move played is legal."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    board = chess.Board()
    game = PlayedGame()
    model.eval()
    while len(game.moves) < max_plies and not board.is_game_over(claim_draw=True):
        move, fell_back = lm_move(
            model,
            tokenizer,
            board,
            game.moves,
            temperature=temperature,
            retries=retries,
            counts=game.attempts,
            rng=rng,
        )
        game.fallbacks += int(fell_back)
        board.push_uci(move)
        game.moves.append(move)
    outcome = board.outcome(claim_draw=True)
    game.result = outcome.result() if outcome is not None else "*"
    return game
