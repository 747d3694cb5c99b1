"""Direct preference optimisation on Stockfish-judged move pairs, Ray-free: a pair's token ids in
the policy's own text format, the policy's log-probability of a completion, and the held-out
measures the ``dpo`` phase reports.

A preference pair (``chess-rl preferences``) is a position, the move Stockfish chose and a worse
one. DPO reads it as the prompt that asks the policy for a move in that position (its text
format: the moves so far, or the board) and two completions, each the answer text of one move:
the move token the policy's masked players pick from, nothing after it. TRL's ``DPOTrainer``
trains on exactly these ids (``prompt_ids``, ``chosen_ids``, ``rejected_ids``), so the loss
moves the logits the players read.

>>> from chessrl.lm.formats import MovesFormat
>>> from chessrl.lm.models import build_chess_tokenizer
>>> tok = build_chess_tokenizer()
>>> ids = pair_ids(tok, MovesFormat(), "e2e4 e7e5", None, " g1f3", " f1a6")
>>> ids is not None and len(ids.chosen) == len(ids.rejected) == 1
True
>>> tok.convert_ids_to_tokens(ids.chosen + ids.rejected)
[' g1f3', ' f1a6']
>>> implicit_accuracy([-1.0, -2.0], [-3.0, -2.5], [-1.5, -2.0], [-3.0, -3.0])
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chess

from chessrl.lm.formats import MovesFormat, TextFormat

#: The pair kinds a preference table holds (``chessrl.rl.preferences.PairKind``): a worse proposal,
#: two ranked proposals, a random legal move, an illegal or unreadable proposal.
PAIR_KINDS: tuple[str, ...] = ("worse", "ranked", "random", "illegal", "unparseable")


@dataclass(frozen=True)
class PairIds:
    """One pair as DPO trains on it: the prompt's ids (with its start token) and each
    completion's ids, the move's answer text in the policy's format."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]


def position_of(prompt: str, fen: str | None) -> tuple[chess.Board, list[str] | None] | None:
    """The board a pair asks about and the moves that led there: the prompt's UCI moves replayed
    from the start (the preference table's ``prompt``) when they reach ``fen`` (or there is no
    fen), else ``fen`` with no history (None: a moves-format prompt cannot be written); None
    when neither gives a legal position.

    >>> board, history = position_of("e2e4 e7e5", None)
    >>> history, board.fen().split()[0]
    (['e2e4', 'e7e5'], 'rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR')
    >>> position_of("e2e4 e2e4", None) is None
    True
    >>> position_of("", "4k3/8/8/8/8/8/8/4K2R w K - 0 1")[1] is None
    True
    """
    board = chess.Board()
    moves = prompt.split()
    try:
        for uci in moves:
            board.push_uci(uci)
        replayed: chess.Board | None = board
    except ValueError:
        replayed = None
    if not fen:
        return (replayed, moves) if replayed is not None else None
    try:
        given = chess.Board(fen)
    except ValueError:
        given = None
    if replayed is not None and (given is None or replayed.fen().split()[:4] == given.fen().split()[:4]):
        return replayed, moves
    if given is None or not given.is_valid():
        return None
    return given, None


def pair_ids(
    tokenizer: Any, fmt: TextFormat, prompt: str, fen: str | None, chosen: str, rejected: str
) -> PairIds | None:
    """A preference row's ids in ``fmt``: the prompt that asks for the move (the moves so far, or
    the position in a board/RookWorld format) and each move's answer text (``" e2e4"``; a game's
    first move has no space in the moves format). None when the position cannot be rebuilt (for
    the moves format: from the prompt's moves), or a completion is empty."""
    from chessrl.lm.models import prompt_ids

    found = position_of(prompt, fen)
    if found is None:
        return None
    board, history = found
    if isinstance(fmt, MovesFormat):
        if history is None:
            return None  # a position without the moves that reach it: no moves-format prompt
    else:
        history = []
    ask = fmt.prompt_for(board, history)
    start = prompt_ids(tokenizer, ask)
    completions = []
    for text in (chosen, rejected):
        move = text.strip()
        if not move:
            return None
        answer = (
            fmt.completion(history, move) if isinstance(fmt, MovesFormat) else fmt.policy_completion(move)
        )
        ids = prompt_ids(tokenizer, ask + answer)
        if ids[: len(start)] != start or len(ids) == len(start):
            return None  # the answer merged into the prompt's last token: not a clean completion
        completions.append(ids[len(start) :])
    return PairIds(start, completions[0], completions[1])


def completion_logps(
    model: Any, rows: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int, batch: int = 64
) -> list[float]:
    """``log p(completion | prompt)`` under ``model`` for each ``(prompt_ids, completion_ids)``
    row: the sum over the completion's tokens of their log-softmax, right-padded batches, no grad."""
    import torch

    from chessrl.lm.models import right_padded

    out: list[float] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(rows), batch):
                part = rows[start : start + batch]
                ids, mask = right_padded([list(p) + list(c) for p, c in part], pad_id, model.device)
                logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), -1)
                for b, (p, c) in enumerate(part):
                    at = torch.arange(len(p) - 1, len(p) + len(c) - 1, device=logp.device)
                    target = torch.tensor(list(c), device=logp.device)
                    out.append(float(logp[b, at, target].sum()))
    finally:
        model.train(was_training)
    return out


def choice_accuracy(chosen: Sequence[float], rejected: Sequence[float]) -> float | None:
    """The share of pairs whose chosen completion the policy finds likelier than the rejected one
    (ties count half): what a player that picks the likelier move would get right.

    >>> choice_accuracy([-1.0, -2.0, -1.0], [-2.0, -1.0, -1.0])
    0.5
    """
    if not chosen:
        return None
    wins = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected, strict=True))
    return wins / len(chosen)


def implicit_accuracy(
    chosen: Sequence[float],
    rejected: Sequence[float],
    ref_chosen: Sequence[float],
    ref_rejected: Sequence[float],
) -> float | None:
    """DPO's reward accuracy: the share of pairs whose implicit reward margin
    ``(log pi(c) - log ref(c)) - (log pi(r) - log ref(r))`` is above zero (what TRL logs as
    ``rewards/accuracies`` on training batches), here on held-out pairs."""
    if not chosen:
        return None
    margins = [
        (c - rc) - (r - rr) for c, r, rc, rr in zip(chosen, rejected, ref_chosen, ref_rejected, strict=True)
    ]
    return sum(m > 0 for m in margins) / len(margins)
