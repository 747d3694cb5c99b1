"""GRPO and online DPO with a scorer as the policy (:class:`chessrl.rl.scorer_policy.ScorerPolicy`:
a reward model's scores of a position's legal moves, softmaxed at the sampling temperature),
Ray-free: the groups drawn from it and the learner's log-probabilities of them. Every sample is
a legal move, so Stockfish's grade judges quality alone, as with ``--masked`` language models.

A scorer sample keeps the token rows of its position's legal moves (``Sample.move_rows``, one
list shared by its group) and its move's index among them (``completion_ids``); the learner
reads each distinct position once, in one pass that reads its moves' shared text once
(:func:`chessrl.lm.shared_prefix.group_logits`).

>>> import chess
>>> from chessrl.rl.grpo import board_prompt
>>> from chessrl.rl.reward import build_reward_model
>>> model, tok = build_reward_model("tiny")
>>> _ = torch.manual_seed(0)
>>> samples = sample_scorer_groups(model, tok, [board_prompt(chess.Board().fen())], GRPOSettings(group_size=3))
>>> len(samples), all(chess.Move.from_uci(s.text) in chess.Board().legal_moves for s in samples)
(3, True)
>>> logp, mask = scorer_completion_logprobs(model, samples, tok.pad_token_id, 1.0)
>>> logp.shape, bool((logp <= 0).all())
(torch.Size([3, 1]), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from chessrl.lm.shared_prefix import group_logits
from chessrl.rl.grpo_types import GRPOSettings, Prompt, Sample
from chessrl.rl.scorer_policy import board_at, move_rows


def sample_scorer_groups(
    model: Any, tokenizer: Any, prompts: Sequence[Prompt], settings: GRPOSettings
) -> list[Sample]:
    """``group_size`` moves of every policy prompt (prompt-major) drawn from the scorer policy at
    ``settings.temperature``; each position's moves scored in one pass, without gradients. A
    position without a legal move (the game is over) gives no sample."""
    pad = int(tokenizer.pad_token_id)
    out: list[Sample] = []
    for i, prompt in enumerate(prompts):
        if prompt.task != "policy":
            raise ValueError(f"a scorer policy answers the policy task only, not {prompt.task!r}")
        board = board_at(prompt.fen, prompt.history)
        moves = sorted(m.uci() for m in board.legal_moves)
        if not moves:
            continue
        rows = move_rows(tokenizer, model.config, board, moves)
        with torch.no_grad():
            scores = group_logits(model, rows, pad).float()
        probs = torch.softmax(scores / max(settings.temperature, 1e-6), dim=-1)
        for k in torch.multinomial(probs, settings.group_size, replacement=True).tolist():
            out.append(Sample(prompt, i, [], [int(k)], moves[k], move_rows=rows))
    return out


def scorer_completion_logprobs(
    model: Any, samples: Sequence[Sample], pad: int, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-probability ``(B, 1)`` of each scorer sample's move under the scorer policy at
    ``temperature`` (the distribution the sampler drew from), under the caller's grad mode, and
    its mask (ones). Each distinct position is scored once."""
    positions: dict[tuple[str, str], int] = {}
    rows_of: list[list[list[int]]] = []
    for s in samples:
        if s.move_rows is None:
            raise ValueError("a sample without move_rows is not a scorer sample")
        if positions.setdefault((s.prompt.fen, s.prompt.history), len(positions)) == len(rows_of):
            rows_of.append(s.move_rows)
    # one pass a position: rows of different positions share too little to read it once
    logps = [
        torch.log_softmax(group_logits(model, rows, pad).float() / max(temperature, 1e-6), dim=-1)
        for rows in rows_of
    ]
    picked = torch.stack(
        [logps[positions[(s.prompt.fen, s.prompt.history)]][s.completion_ids[0]] for s in samples]
    )[:, None]
    return picked, torch.ones_like(picked)
