"""The legal-move loss: the rules of chess as a training signal for a language model that reads
games one move token at a time.

A game gives one target per position, the move that was played. Cross-entropy on it teaches
legality only slowly: an illegal move is pushed down only as a side effect of raising the played
one, and a small model still puts mass on moves from empty squares or through pieces after
millions of tokens. Next to that loss, sft can add, for every position whose next token is a
move, ``-log P(legal)``: the log of the total probability of the legal moves there (from
python-chess). It pushes down every illegal move and leaves the split among legal moves to the
game's move.

>>> from chessrl.lm.tokenizer import build_chess_tokenizer
>>> tok = build_chess_tokenizer()
>>> moves = MoveTokens(tok)
>>> ids = [tok.bos_token_id, *tok("e2e4 e7e5", add_special_tokens=False)["input_ids"], tok.eos_token_id]
>>> flat, counts = legal_move_targets(ids, moves, tok.bos_token_id)
>>> counts          # 20 legal first moves, 20 replies, none after the last move (<eos> follows)
[20, 20, 0, 0]
>>> tok.convert_ids_to_tokens(flat[20:22])   # replies carry the space before them, like the game's
[' g8h6', ' g8f6']
>>> legal = pad_legal_targets([flat], [counts])
>>> legal.shape
(1, 4, 20)

Only a tokenizer that gives every UCI move one token (the chess tokenizer) can carry the loss:
:class:`MoveTokens` says so for any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import chess
import numpy as np
import torch

from chessrl.lm.tokenizer import all_uci_moves

_PROMOTION_INDEX = {None: 0, chess.KNIGHT: 1, chess.BISHOP: 2, chess.ROOK: 3, chess.QUEEN: 4}


def _move_key(move: chess.Move) -> int:
    return (move.from_square * 64 + move.to_square) * 5 + _PROMOTION_INDEX[move.promotion]


class MoveTokens:
    """The token ids of every UCI move in a tokenizer, with and without the space before it.

    Raises ``ValueError`` when some move is not a single token in either form (a BPE tokenizer
    such as GPT-2's splits ``e2e4`` into pieces).
    """

    def __init__(self, tokenizer: object) -> None:
        vocab: dict[str, int] = tokenizer.get_vocab()  # type: ignore[attr-defined]
        self.plain = np.full(64 * 64 * 5, -1, dtype=np.int32)
        self.spaced = np.full(64 * 64 * 5, -1, dtype=np.int32)
        #: token id -> (move, whether the token carries a leading space)
        self.move_of: dict[int, tuple[chess.Move, bool]] = {}
        missing: list[str] = []
        for uci in all_uci_moves():
            move = chess.Move.from_uci(uci)
            key = _move_key(move)
            for table, text, spaced in ((self.plain, uci, False), (self.spaced, " " + uci, True)):
                if text in vocab:
                    table[key] = vocab[text]
                    self.move_of[vocab[text]] = (move, spaced)
            if self.plain[key] < 0 and self.spaced[key] < 0:
                missing.append(uci)
        if missing:
            raise ValueError(
                f"the tokenizer has no single token for {len(missing)} of the 1968 UCI moves "
                f"(e.g. {', '.join(missing[:3])}): the legal-move loss needs one token per move "
                "(the chess tokenizer of the presets)"
            )
        # a move missing in one form falls back to the other
        self.plain = np.where(self.plain >= 0, self.plain, self.spaced)
        self.spaced = np.where(self.spaced >= 0, self.spaced, self.plain)

    def token(self, move: chess.Move, spaced: bool = True) -> int:
        """The token id of ``move``, with the space before it (a move after ``M:`` or in a game
        after its first) or without."""
        return int((self.spaced if spaced else self.plain)[_move_key(move)])


def legal_move_targets(ids: Sequence[int], moves: MoveTokens, start_id: int) -> tuple[list[int], list[int]]:
    """The legal moves at each position of a block of whole games, as token ids.

    ``counts[t]`` is the number of legal moves when token ``t + 1`` is a move of the game (else
    0), and ``flat`` holds those ids position after position, in the form (space or not) of the
    game's own next token. The board restarts at every ``start_id`` (``<bos>``), so a packed
    block of several games works; tokens that are not moves (a result prefix) leave the board as
    it is, and a move that is not legal (a corrupt game) ends that game's targets.
    """
    board = chess.Board()
    flat: list[int] = []
    counts = [0] * len(ids)
    playing = False
    legal_now: dict[int, chess.Move] = {}  # the legal moves of the current position, by key
    move_of = moves.move_of
    plain, spaced = moves.plain.tolist(), moves.spaced.tolist()
    promotion = _PROMOTION_INDEX
    for t in range(len(ids) - 1):
        token = ids[t]
        if token == start_id:
            board.reset()
            playing = True
        else:
            found = move_of.get(token)
            if found is not None:
                move = legal_now.get(_move_key(found[0])) if playing else None
                if move is None:
                    playing = False
                else:
                    board.push(move)
        nxt = move_of.get(ids[t + 1])
        if not playing or nxt is None:
            legal_now = {}
            continue
        legal_now = {
            (m.from_square * 64 + m.to_square) * 5 + promotion[m.promotion]: m
            for m in board.generate_legal_moves()
        }
        table = spaced if nxt[1] else plain
        flat.extend([table[key] for key in legal_now])
        counts[t] = len(legal_now)
    return flat, counts


def pad_legal_targets(
    flat_rows: Sequence[Sequence[float]],
    count_rows: Sequence[Sequence[int]],
    multiple: int = 1,
    *,
    fill: float = -1,
    dtype: Any = np.int64,
) -> np.ndarray:
    """Rows of (flat ids, counts) from :func:`legal_move_targets` -> an int64 array
    ``[rows, positions, width]`` padded with -1 (what :func:`legal_move_loss` takes). The width
    is the most legal moves of any position, rounded up to ``multiple`` (few distinct shapes, so
    few ``torch.compile`` recompiles).

    >>> pad_legal_targets([[5, 6, 7]], [[2, 0, 1]]).tolist()
    [[[5, 6], [-1, -1], [7, -1]]]
    >>> pad_legal_targets([[5, 6, 7]], [[2, 0, 1]], multiple=4).shape
    (1, 3, 4)
    >>> pad_legal_targets([[0.5, 0.5, 1.0]], [[2, 0, 1]], fill=0, dtype=np.float32).tolist()  # soft targets' weights
    [[[0.5, 0.5], [0.0, 0.0], [1.0, 0.0]]]
    """
    counts = np.asarray(count_rows, dtype=np.int64)
    rows, positions = counts.shape
    width = -(-max(1, int(counts.max(initial=0))) // multiple) * multiple
    out = np.full((rows, positions, width), fill, dtype=dtype)
    for r in range(rows):
        n = counts[r]
        total = int(n.sum())
        if total == 0:
            continue
        flat = np.asarray(flat_rows[r], dtype=dtype)[:total]
        where = np.repeat(np.arange(positions), n)
        starts = np.cumsum(n) - n
        out[r, where, np.arange(total) - np.repeat(starts, n)] = flat
    return out


def legal_move_loss(logits: torch.Tensor, legal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``-log P(legal)`` averaged over the positions that have legal moves, and the mean legal
    probability mass there (a metric).

    ``logits[b, t]`` predicts token ``t + 1``; ``legal[b, t]`` lists the legal moves for it,
    padded with -1 (:func:`pad_legal_targets`).

    >>> logits = torch.zeros(1, 2, 4)          # uniform over 4 tokens
    >>> legal = torch.tensor([[[0, 1], [-1, -1]]])
    >>> loss, mass = legal_move_loss(logits, legal)
    >>> round(loss.item(), 4), round(mass.item(), 2)   # -log(2/4), on the one position with targets
    (0.6931, 0.5)
    """
    logits = logits.float()
    return _legal_nll(logits, logits.logsumexp(-1), legal)


def _legal_nll(
    logits: torch.Tensor, lse: torch.Tensor, legal: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    valid = legal >= 0
    has = valid.any(-1)
    picked = logits.gather(-1, legal.clamp(min=0)).masked_fill(~valid, float("-inf"))
    nll = torch.where(has, lse - picked.logsumexp(-1), 0.0)
    positions = has.sum().clamp(min=1)
    return nll.sum() / positions, (torch.exp(-nll.detach()) * has).sum() / positions


def lm_and_legal_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    legal: torch.Tensor,
    weight: float,
    num_items: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The causal LM cross-entropy plus ``weight`` x :func:`legal_move_loss`, sharing one pass
    over the vocabulary. Returns (loss, cross-entropy, legal-move loss, legal mass).

    ``labels`` are the input ids with -100 where there is no target (they are shifted here, like
    transformers' ``ForCausalLMLoss``); the cross-entropy is their mean, or their sum over
    ``num_items`` when given (the Trainer's count of targets for gradient accumulation).
    Under ``torch.compile`` (a fixed ``legal`` width: :func:`pad_legal_targets` rounds it up)
    the whole loss costs about what the cross-entropy alone does.

    >>> logits = torch.zeros(1, 3, 4)
    >>> labels = torch.tensor([[2, 1, -100]])
    >>> legal = torch.tensor([[[0, 1], [1, -1], [-1, -1]]])
    >>> [round(x.item(), 4) for x in lm_and_legal_loss(logits, labels, legal, 0.5)]  # log 4; -(log 2/4 + log 1/4) / 2
    [1.9062, 1.3863, 1.0397, 0.375]
    """
    logits = logits.float()
    lse = logits.logsumexp(-1)
    targets = labels[:, 1:]
    mask = targets != -100
    picked = logits[:, :-1].gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    ce_sum = torch.where(mask, lse[:, :-1] - picked, 0.0).sum()
    ce = ce_sum / (num_items if num_items is not None else mask.sum().clamp(min=1))
    legal_loss, mass = _legal_nll(logits, lse, legal)
    return ce + weight * legal_loss, ce.detach(), legal_loss.detach(), mass


def soft_targets(expected: Sequence[float], temperature: float) -> np.ndarray:
    """The distillation target over a position's legal moves: ``softmax(E / temperature)`` of
    each move's expected score ``E`` (Stockfish's, in [0, 1]). A move 0.1 of a point worse than
    another gets ``exp(-0.1 / temperature)`` of its probability (0.14 at temperature 0.05), a
    blunder next to none; a near-tie splits the mass.

    >>> [round(float(w), 3) for w in soft_targets([0.9, 0.9, 0.4], 0.05)]
    [0.5, 0.5, 0.0]
    >>> [round(float(w), 3) for w in soft_targets([0.6, 0.5], 0.05)]
    [0.881, 0.119]
    """
    values = np.asarray(expected, dtype=np.float64) / max(temperature, 1e-6)
    values -= values.max(initial=0.0) if len(values) else 0.0
    weights = np.exp(values)
    return (weights / weights.sum()).astype(np.float32) if len(weights) else weights.astype(np.float32)


#: The soft target's default temperature on each value scale
#: (:func:`chessrl.engine.move_value.annotated_values`). On the
#: margin scale a move 0.1 of expected score worse than another in an undecided position is about
#: 0.058 worse (the median ratio, 0.575, over 978 pairs of moves 0.05-0.15 apart in positions of
#: 60 games annotated as ``annotate`` does; 10-90%: 0.52-0.78), so 0.03 there gives it
#: exp(-0.058 / 0.03) = 0.15 of the other's probability, as 0.05 gives 0.14 on the expected scale.
TARGET_TEMPERATURE: dict[str, float] = {"expected": 0.05, "margin": 0.03}


def lm_and_soft_move_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    moves: torch.Tensor,
    weights: torch.Tensor,
    num_items: torch.Tensor | None = None,
    legal_weight: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The causal LM cross-entropy where a position's next token is a hard target, and where it
    is a move with a soft target, the cross-entropy against that target instead:
    ``-sum_k weights[k] * log P(moves[k])`` over the position's legal moves (``moves[b, t]``,
    padded with -1 like :func:`pad_legal_targets`; ``weights[b, t]`` sums to 1 there). The soft
    target pushes every illegal move down, but a sharp one says little about which moves are
    legal: ``legal_weight`` adds that times ``-log P(legal moves)`` at every position with legal
    moves (the moves format's distillation, measured: held-out legal argmax 50% -> 74% at 1,000
    steps). A position whose weights are all 0 has no soft target: its hard target stays, and
    its legal moves feed the legality term alone (a game's played moves mixed with annotated
    games). A position with a soft target counts once, like a hard one. Returns (loss, the hard
    cross-entropy, the soft cross-entropy, the legal mass where there are legal moves).

    >>> logits = torch.zeros(1, 3, 4)                       # uniform over 4 tokens
    >>> labels = torch.tensor([[0, 1, 3]])                  # token 1 is the move, token 2 <eos>
    >>> moves = torch.tensor([[[1, 2], [-1, -1], [-1, -1]]])
    >>> weights = torch.tensor([[[0.75, 0.25], [0.0, 0.0], [0.0, 0.0]]])
    >>> [round(x.item(), 4) for x in lm_and_soft_move_loss(logits, labels, moves, weights)]
    [1.3863, 1.3863, 1.3863, 0.5]
    >>> round(lm_and_soft_move_loss(logits, labels, moves, weights, legal_weight=1.0)[0].item(), 4)  # + log 2 / 2
    1.7329
    >>> played = torch.zeros_like(weights)                  # no soft target: the hard one stays (2 targets)
    >>> [round(x.item(), 4) for x in lm_and_soft_move_loss(logits, labels, moves, played, legal_weight=1.0)]
    [1.7329, 1.3863, 0.0, 0.5]
    """
    logits = logits.float()
    lse = logits.logsumexp(-1)
    valid = moves >= 0
    listed = valid.any(-1)  # [B, T]: logits[:, t] has legal moves
    soft = listed & (weights.sum(-1) > 0)  # and a soft target
    targets = labels[:, 1:]
    hard = (targets != -100) & ~soft[:, :-1]
    picked = logits[:, :-1].gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    hard_sum = torch.where(hard, lse[:, :-1] - picked, 0.0).sum()
    move_logp = logits.gather(-1, moves.clamp(min=0)) - lse.unsqueeze(-1)
    soft_ce = -(weights * move_logp.masked_fill(~valid, 0.0)).sum(-1)
    soft_sum = torch.where(soft, soft_ce, 0.0).sum()
    count = num_items if num_items is not None else (hard.sum() + soft.sum()).clamp(min=1)
    legal_logp = torch.where(listed, move_logp.masked_fill(~valid, float("-inf")).logsumexp(-1), 0.0)
    mass = torch.where(listed, legal_logp.exp(), 0.0).sum()
    n_hard, n_soft, n_listed = hard.sum().clamp(min=1), soft.sum().clamp(min=1), listed.sum().clamp(min=1)
    return (
        (hard_sum + soft_sum - legal_weight * legal_logp.sum()) / count,
        (hard_sum / n_hard).detach(),
        (soft_sum / n_soft).detach(),
        (mass / n_listed).detach(),
    )
