"""GRPO with engine-verified rewards on RookWorld's two tasks, Ray-free: the rewards, the group
advantages and the loss. ``pipelines/grpo.py`` runs them on a Ray Train learner with the
EnginePool scoring moves.

Tasks (:class:`chessrl.lm.formats.RookWorldFormat`):

- policy ``P: <FEN> M:`` → `` <move>``. Reward: the floor (``illegal_reward``) for an illegal or
  unparseable move; otherwise how much of the best move's expected score the move keeps, from
  Stockfish at the configured limit: ``clamp(1 - (E_best - E_move) / max_loss, 0, 1)`` with ``E``
  the expected score (win + draw / 2) of the side to move. The best move gets 1, a move that gives
  away ``max_loss`` (0.5: an even position thrown into a lost one) or more gets 0.
- environment ``A: <FEN>+<move>+<history>+`` → ``<next FEN>+<reward>+<terminated>+<truncated>``.
  Reward: each field checked exactly against python-chess, partial credit by
  :data:`ENV_WEIGHTS` (the FEN 0.7, each flag 0.1); exact match = all four right, nothing extra.

>>> policy_reward("legal", best=0.55, move=0.55), policy_reward("legal", best=0.55, move=0.05)
(1.0, 0.0)
>>> policy_reward("illegal", best=0.55, move=None)
-1.0
>>> env_reward("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1+0+0+0",
...            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1+0+0+0").reward
1.0

Group advantages, the loss types and the completion log-probabilities are
:mod:`chessrl.rl.grpo_loss`; the update on the scored groups (:func:`grpo_update`, online DPO),
:mod:`chessrl.rl.grpo_learner`; prompts from the policy's own games, :mod:`chessrl.rl.own_games`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import chess
import torch

from chessrl.data.positions import Position, split_counts
from chessrl.engine.client import Score
from chessrl.engine.move_value import move_value, position_value
from chessrl.lm.formats import BoardFormat, MovesFormat, RookWorldFormat, get_format, parse_move
from chessrl.lm.lm_data import ENV_HISTORY
from chessrl.rl.grpo_learner import grpo_update as grpo_update  # re-exported: the update
from chessrl.rl.grpo_learner import online_dpo_update as online_dpo_update
from chessrl.rl.grpo_loss import completion_logprobs as completion_logprobs  # re-exported: callers
from chessrl.rl.grpo_loss import group_advantages as group_advantages
from chessrl.rl.grpo_loss import grpo_loss as grpo_loss
from chessrl.rl.grpo_loss import masked_completion_logprobs as masked_completion_logprobs
from chessrl.rl.grpo_types import (  # noqa: F401 - re-exported: the settings, prompts and samples of GRPO
    ENV_FIELDS,
    ENV_WEIGHTS,
    LOSS_TYPES,
    TASKS,
    GRPOSettings,
    LossType,
    Prompt,
    Sample,
)


def policy_reward(
    status: str, *, best: float | None, move: float | None, settings: GRPOSettings | None = None
) -> float:
    """The policy task's reward from the move's parse ``status`` and the expected scores (side to
    move, in [0, 1]) of the best move and of the move played."""
    s = settings or GRPOSettings()
    if status != "legal" or best is None or move is None:
        return s.illegal_reward
    loss = max(0.0, best - move)
    if loss <= s.dead_zone:
        loss = 0.0
    return float(min(1.0, max(0.0, 1.0 - loss / s.max_loss)))


@dataclass(frozen=True)
class EnvScore:
    """An environment-task completion checked field by field."""

    fields: dict[str, bool]
    reward: float
    exact: bool


def env_reward(completion: str, target: str, weights: dict[str, float] | None = None) -> EnvScore:
    """``completion`` (``<next FEN>+<reward>+<terminated>+<truncated>``) against ``target``, the
    answer python-chess gives (:meth:`RookWorldFormat.env_target`). A missing field is wrong;
    anything after the fourth field makes the answer inexact but costs no credit.

    >>> e = env_reward("8/8/8/8/8/8/8/K6k b - - 1 1+1+0", "8/8/8/8/8/8/8/K6k b - - 1 1+0+0+0")
    >>> e.fields, round(e.reward, 2), e.exact
    ({'fen': True, 'reward': False, 'terminated': True, 'truncated': False}, 0.8, False)
    """
    w = weights or ENV_WEIGHTS
    got = completion.strip().split("+")
    want = target.split("+")
    fields = {name: i < len(got) and got[i].strip() == want[i] for i, name in enumerate(ENV_FIELDS)}
    reward = sum(w[name] for name, ok in fields.items() if ok)
    return EnvScore(fields, round(float(reward), 6), all(fields.values()) and len(got) == len(ENV_FIELDS))


def policy_prompt(fen: str, phase: str = "") -> Prompt:
    """``P: <FEN> M:``."""
    return Prompt("policy", RookWorldFormat().policy_prompt(chess.Board(fen)), fen, phase=phase)


def moves_prompt(history: Sequence[str], phase: str = "") -> Prompt:
    """The ``moves`` format's policy task: the game's moves so far, answered by the next move
    (the format ``sft`` trains by default, so GRPO can start from that model).

    >>> p = moves_prompt(["e2e4", "e7e5"])
    >>> p.task, p.text, p.fen
    ('policy', 'e2e4 e7e5', 'rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2')
    """
    board = chess.Board()
    for move in history:
        board.push_uci(move)
    return Prompt(
        "policy", MovesFormat().prompt(list(history)), board.fen(), phase=phase, history=" ".join(history)
    )


def board_prompt(
    fen: str, phase: str = "", history: Sequence[str] = (), text_format: str = "board"
) -> Prompt:
    """A position format's policy task (``board``: the position, one character a square, then
    ``M:``; ``facts``: the same with what the rules say of it). ``history``, the moves that led
    there where known, is kept for the grade, not shown.

    >>> board_prompt(chess.Board().fen()).text[-12:], board_prompt(chess.Board().fen(), text_format="facts").text[-10:]
    (' w KQkq - M:', 'h3 h2h4 M:')
    """
    fmt = get_format(text_format)
    assert isinstance(fmt, BoardFormat), f"{text_format} is not a position format"
    return Prompt("policy", fmt.policy_prompt(chess.Board(fen)), fen, phase=phase, history=" ".join(history))


def env_prompt(fen: str, move: str, history: Sequence[str] = (), phase: str = "") -> Prompt:
    """``A: <FEN>+<move>+<history>+`` and its answer (``move`` must be legal in ``fen``)."""
    fmt, board = RookWorldFormat(), chess.Board(fen)
    return Prompt(
        "environment", fmt.env_prompt(board, move, history), fen, move, fmt.env_target(board, move), phase
    )


def parse_policy_completion(fen: str, completion: str) -> tuple[str, str | None]:
    """``(status, move)`` of a policy-task completion: ``legal`` / ``illegal`` / ``unparseable``."""
    parsed = parse_move(chess.Board(fen), completion)
    return parsed.status, parsed.move


# -- experience: sampled completions and their rewards ---------------------------------------------


def completion_length(ids: Sequence[int], eos: int | None) -> int:
    """Tokens of a completion that are trained on: up to and including the first EOS.

    >>> completion_length([7, 8, 2, 2], eos=2), completion_length([7, 8], eos=2)
    (3, 2)
    """
    ids = list(ids)
    if eos is not None and eos in ids:
        return ids.index(eos) + 1
    return len(ids)


def sample_groups(
    model: torch.nn.Module,
    tokenizer: object,
    prompts: Sequence[Prompt],
    settings: GRPOSettings,
    max_new_tokens: dict[str, int],
) -> list[Sample]:
    """``group_size`` sampled completions of every prompt (prompt-major), each task's prompts in
    one batched generation of at most its ``max_new_tokens[task]`` tokens; of a scorer
    (a reward model as the policy), its moves (:func:`chessrl.rl.grpo_scorer.sample_scorer_groups`)."""
    from chessrl.lm.models import complete_ids, prompt_ids
    from chessrl.rl.scorer_policy import is_scorer

    if is_scorer(model):  # a reward model as the policy: its moves are legal by construction
        from chessrl.rl.grpo_scorer import sample_scorer_groups

        return sample_scorer_groups(model, tokenizer, prompts, settings)
    eos = getattr(tokenizer, "eos_token_id", None)
    out: list[Sample | None] = [None] * (len(prompts) * settings.group_size)
    for task in TASKS:
        index = [i for i, p in enumerate(prompts) if p.task == task]
        if not index:
            continue
        rows = [prompt_ids(tokenizer, prompts[i].text) for i in index]  # type: ignore[arg-type]
        if task == "policy" and settings.masked:
            _sample_masked(model, tokenizer, prompts, index, rows, settings, out)
            continue
        seqs = complete_ids(
            model, tokenizer, rows, settings.group_size, settings.temperature, max_new_tokens[task]
        )  # type: ignore[arg-type]
        for k, i in enumerate(index):
            for j in range(settings.group_size):
                ids = seqs[k * settings.group_size + j].tolist()
                ids = ids[: completion_length(ids, eos)]
                text = tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
                out[i * settings.group_size + j] = Sample(prompts[i], i, rows[k], ids, text)
    return [s for s in out if s is not None]


def _sample_masked(
    model: torch.nn.Module,
    tokenizer: object,
    prompts: Sequence[Prompt],
    index: list[int],
    rows: list[list[int]],
    settings: GRPOSettings,
    out: list[Sample | None],
) -> None:
    """The policy prompts' groups drawn from the legal-masked policy: one token, a legal move."""
    from chessrl.lm.masked import masked_moves

    boards = [chess.Board(prompts[i].fen) for i in index]
    # the answer's move token carries a space unless it is a game's first move in the moves format
    spaced = [bool(prompts[i].text.strip()) for i in index]
    choices = masked_moves(
        model, tokenizer, boards, rows, spaced, n=settings.group_size, temperature=settings.temperature
    )
    for k, i in enumerate(index):
        for j, token in enumerate(choices[k].tokens):
            text = tokenizer.decode([token])  # type: ignore[attr-defined]
            out[i * settings.group_size + j] = Sample(
                prompts[i], i, rows[k], [token], text, legal_ids=choices[k].legal_ids
            )


def score_samples(
    samples: Sequence[Sample], scores: Callable[[list[str]], list[Score]], settings: GRPOSettings
) -> None:
    """Set every sample's reward, status and fields. ``scores(fens)`` gives the engine's score of
    the side to move in each position (``Analysis.score``: Stockfish through the EnginePool, one
    batched call for the roots and the positions after every distinct legal move); a move's loss
    is measured on ``settings.grade_scale`` (:mod:`chessrl.engine.move_value`), with the prompt's
    ``history`` on the board where it has one."""
    legal: dict[int, str] = {}
    for i, s in enumerate(samples):
        if s.prompt.task == "environment":
            score = env_reward(s.text, s.prompt.target or "", settings.env_weights)
            s.reward, s.fields = score.reward, score.fields
            s.status = "exact" if score.exact else "partial"
            continue
        s.status, move = parse_policy_completion(s.prompt.fen, s.text)
        if move is not None:
            legal[i] = move
    roots = sorted({samples[i].prompt.fen for i in legal})
    children = sorted({(samples[i].prompt.fen, samples[i].prompt.history, m) for i, m in legal.items()})
    after = [_board_after(fen, history, move) for fen, history, move in children]
    fens = roots + sorted({b.fen() for b in after})
    score = dict(zip(fens, scores(fens), strict=True)) if roots else {}
    scale = settings.grade_scale
    best = {fen: position_value(score[fen], scale) for fen in roots}  # type: ignore[arg-type]
    moved = {key: move_value(b, score[b.fen()], scale) for key, b in zip(children, after, strict=True)}  # type: ignore[arg-type]
    for i, s in enumerate(samples):
        if s.prompt.task == "policy":
            move = legal.get(i)
            s.reward = policy_reward(
                s.status,
                best=best.get(s.prompt.fen),
                move=moved.get((s.prompt.fen, s.prompt.history, move)) if move else None,
                settings=settings,
            )


def _board_after(fen: str, history: str, move: str) -> chess.Board:
    """The board after ``move`` in ``fen``, with ``history`` (the moves from the start position
    to ``fen``) on its stack where it leads there."""
    from chessrl.rl.scorer_policy import board_at

    board = board_at(fen, history)
    board.push_uci(move)
    return board


def batch_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """Reward by task, the policy task's legal rate, the environment task's exact and per-field
    accuracy, the share of zero-variance groups, and the task mix of the batch."""
    from chessrl.rl.policy_gradient import zero_variance_group_share

    out: dict[str, float] = {}
    policy = [s for s in samples if s.prompt.task == "policy"]
    env = [s for s in samples if s.prompt.task == "environment"]
    out["reward_mean"] = sum(s.reward for s in samples) / max(1, len(samples))
    out["reward_policy"] = sum(s.reward for s in policy) / max(1, len(policy))
    out["reward_environment"] = sum(s.reward for s in env) / max(1, len(env))
    out["legal_rate"] = sum(s.status == "legal" for s in policy) / max(1, len(policy))
    out["env_exact"] = sum(s.status == "exact" for s in env) / max(1, len(env))
    for name in ENV_FIELDS:
        out[f"env_{name}_accuracy"] = sum(s.fields.get(name, False) for s in env) / max(1, len(env))
    out["policy_share"] = len(policy) / max(1, len(samples))
    out["zero_variance_groups"] = (
        zero_variance_group_share(torch.tensor([s.reward for s in samples]), [s.group for s in samples])
        if samples
        else 0.0
    )
    out["completion_tokens_mean"] = sum(len(s.completion_ids) for s in samples) / max(1, len(samples))
    return out


@torch.no_grad()
def evaluate_tasks(
    model: torch.nn.Module,
    tokenizer: object,
    prompts: Sequence[Prompt],
    max_new_tokens: dict[str, int],
    scores: Callable[[list[str]], list[Score]] | None = None,
    settings: GRPOSettings | None = None,
) -> dict[str, float]:
    """Greedy answers to ``prompts`` (unmasked): the policy task's legal-move rate and the
    environment task's exact-match accuracy (and per-field accuracy), with the counts (a
    scorer's answer is its argmax legal move). With
    ``scores`` (the engine's scores, as :func:`score_samples` takes), also the policy
    task's mean reward of the greedy move (``policy_reward``: what GRPO maximises, at argmax)."""
    samples = _greedy_samples(model, tokenizer, prompts, max_new_tokens)
    if scores is not None:
        score_samples(samples, scores, settings or GRPOSettings())
    else:
        for s in samples:
            if s.prompt.task == "policy":
                s.status = parse_policy_completion(s.prompt.fen, s.text)[0]
            else:
                score = env_reward(s.text, s.prompt.target or "")
                s.status, s.fields = ("exact" if score.exact else "partial"), score.fields
    m = batch_metrics(samples)
    policy = sum(s.prompt.task == "policy" for s in samples)
    out = {
        "legal_rate": m["legal_rate"],
        "env_exact": m["env_exact"],
        "env_fen_accuracy": m["env_fen_accuracy"],
        "policy_positions": float(policy),
        "env_positions": float(len(samples) - policy),
    }
    if scores is not None:
        out["policy_reward"] = m["reward_policy"]
    return out


@torch.no_grad()
def _greedy_samples(
    model: torch.nn.Module, tokenizer: object, prompts: Sequence[Prompt], max_new_tokens: dict[str, int]
) -> list[Sample]:
    """Each prompt's greedy answer as a :class:`Sample` (a scorer's: its best legal move)."""
    from chessrl.lm.models import complete_ids, prompt_ids
    from chessrl.rl.scorer_policy import is_scorer

    if is_scorer(model):
        from chessrl.rl.scorer_policy import ScorerPolicy

        moves, _ = ScorerPolicy(model, tokenizer).pick_moves([(p.fen, p.history) for p in prompts])
        return [Sample(p, i, [], [0], move) for i, (p, move) in enumerate(zip(prompts, moves, strict=True))]
    was_training = model.training
    model.eval()
    eos = getattr(tokenizer, "eos_token_id", None)
    samples: list[Sample] = []
    try:
        for task in TASKS:
            index = [i for i, p in enumerate(prompts) if p.task == task]
            for start in range(0, len(index), 64):
                part = index[start : start + 64]
                rows = [prompt_ids(tokenizer, prompts[i].text) for i in part]  # type: ignore[arg-type]
                seqs = complete_ids(model, tokenizer, rows, 1, 0.0, max_new_tokens[task])  # type: ignore[arg-type]
                for k, i in enumerate(part):
                    ids = seqs[k].tolist()
                    ids = ids[: completion_length(ids, eos)]
                    text = tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
                    samples.append(Sample(prompts[i], i, rows[k], ids, text))
    finally:
        model.train(was_training)
    return samples


def task_prompts(
    positions: Sequence[Position], policy_share: float, rng: random.Random, text_format: str = "rookworld"
) -> list[Prompt]:
    """Prompts for ``positions``: ``policy_share`` of them (largest remainder) policy tasks, the
    rest environment tasks applying the game's next move (a seeded random legal move at a game's
    end) with the game's last moves as history, in a seeded order. ``text_format="moves"`` asks
    every position as the moves so far (:func:`moves_prompt`), ``board`` as its fixed-length
    encoding and ``facts`` as that with the rules' facts (:func:`board_prompt`): none has an
    environment task, so ``policy_share`` must be 1.

    >>> from chessrl.data.positions import PositionSampler
    >>> picks = PositionSampler([{"moves": "e2e4 e7e5 g1f3"}], seed=0).sample(5)
    >>> sorted(p.task for p in task_prompts(picks, 0.8, random.Random(0)))
    ['environment', 'policy', 'policy', 'policy', 'policy']
    >>> [p.text for p in task_prompts(picks[:1], 1.0, random.Random(0), "moves")] == [" ".join(picks[0].history)]
    True
    """
    if text_format in ("moves", "board", "facts"):
        if policy_share < 1.0:
            raise ValueError(f"the {text_format} format has no environment task: policy_share must be 1")
        asked = [
            moves_prompt(pos.history, pos.phase)
            if text_format == "moves"
            else board_prompt(pos.fen, pos.phase, pos.history, text_format)
            for pos in positions
        ]
        rng.shuffle(asked)
        return asked
    n_policy, _ = split_counts(len(positions), [policy_share, 1.0 - policy_share])
    out: list[Prompt] = []
    for k, pos in enumerate(positions):
        if k < n_policy:
            out.append(policy_prompt(pos.fen, pos.phase))
        else:
            move = pos.next_move or rng.choice(list(chess.Board(pos.fen).legal_moves)).uci()
            out.append(env_prompt(pos.fen, move, pos.history[-ENV_HISTORY:], pos.phase))
    rng.shuffle(out)
    return out
