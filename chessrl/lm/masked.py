"""A language model's policy restricted to the legal moves of a position: the logits of the legal
move tokens, renormalised. Ray-free; the RL phases sample from it, their learners and references
score with it, and ``lm:DIR,masked`` players play its argmax.

With the chess tokenizer every UCI move is one token, so "the legal moves" is a list of token ids
and the masked distribution is a softmax over those logits alone:
``p_masked(k) = p(k) / sum over legal j of p(j)`` — the full-vocabulary probabilities, renormalised.

>>> from chessrl.lm.tokenizer import build_chess_tokenizer
>>> tok = build_chess_tokenizer()
>>> masked = MaskedMoves(tok)
>>> ids = masked.legal_ids(chess.Board(), spaced=False)
>>> len(ids), sorted(tok.convert_ids_to_tokens(ids))[:2]
(20, ['a2a3', 'a2a4'])
>>> logits = torch.zeros(1, len(tok))
>>> lp = masked_log_softmax(logits, torch.tensor([ids]))
>>> round(float(lp.exp().sum()), 6), round(float(lp[0, 0].exp()), 4)   # 20 equal moves: 1/20 each
(1.0, 0.05)

A tokenizer that spells moves in pieces (GPT-2's BPE) cannot be masked this way: building a
:class:`MaskedMoves` from one raises :class:`MaskingError` with the reason.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import chess
import torch

from chessrl.lm.formats import MovesFormat, TextFormat
from chessrl.lm.legality import MoveTokens, _move_key
from cluster.errors import UserError


class MaskingError(UserError, ValueError):
    """A model whose tokenizer cannot be masked to legal moves (no single token per move)."""


class MaskedMoves:
    """The legal move tokens of positions, for one tokenizer (built once, reused)."""

    def __init__(self, tokenizer: Any) -> None:
        moves = getattr(tokenizer, "_chessrl_move_tokens", None)  # built once per tokenizer
        if moves is None:
            try:
                moves = MoveTokens(tokenizer)
            except ValueError as exc:
                raise MaskingError(
                    f"masked play and sampling need one token per move: {str(exc).split(': the legal')[0]}"
                ) from None
            tokenizer._chessrl_move_tokens = moves
        self.moves: MoveTokens = moves
        self.tokenizer = tokenizer

    def legal_ids(self, board: chess.Board, spaced: bool) -> list[int]:
        """Token ids of the legal moves in ``board`` (sorted by UCI), with or without the space
        before them (the form the prompt's answer takes)."""
        table = self.moves.spaced if spaced else self.moves.plain
        return [int(table[_move_key(m)]) for m in sorted(board.legal_moves, key=chess.Move.uci)]

    def move_of(self, token: int) -> str:
        """The UCI move of a move token."""
        return self.moves.move_of[token][0].uci()


def answer_spaced(fmt: TextFormat, history: Sequence[str]) -> bool:
    """Whether the move token that answers a prompt carries a space (every move but a game's first
    in the moves format; always in RookWorld's policy task).

    >>> from chessrl.lm.formats import RookWorldFormat
    >>> answer_spaced(MovesFormat(), []), answer_spaced(MovesFormat(), ["e2e4"]), answer_spaced(RookWorldFormat(), [])
    (False, True, True)
    """
    if not isinstance(fmt, MovesFormat):  # rookworld's and board's "M: <move>"
        return True
    return fmt.completion(list(history), "e2e4").startswith(" ")


def pad_ids(rows: Sequence[Sequence[int]], device: Any = None) -> torch.Tensor:
    """Legal-id lists -> ``(B, W)`` padded with -1.

    >>> pad_ids([[4, 5], [6]]).tolist()
    [[4, 5], [6, -1]]
    """
    width = max(1, max(len(r) for r in rows))
    return torch.tensor([list(r) + [-1] * (width - len(r)) for r in rows], dtype=torch.long, device=device)


def masked_log_softmax(logits: torch.Tensor, legal: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities ``(B, W)`` of each row's legal moves (``legal``: ids padded with -1; the
    padding gets -inf) under the softmax of ``logits / temperature`` restricted to them."""
    valid = legal >= 0
    picked = logits.float().gather(-1, legal.clamp(min=0)) / max(temperature, 1e-6)
    return torch.log_softmax(picked.masked_fill(~valid, float("-inf")), -1)


def legal_nll(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """``-log P(legal)`` of each row ``(B,)`` under the full-vocabulary softmax: the legality
    term that trains what masking hides (0 where a row has no legal ids).

    >>> round(float(legal_nll(torch.zeros(1, 4), torch.tensor([[0, 1]]))[0]), 4)   # -log(2/4)
    0.6931
    """
    logits = logits.float()
    valid = legal >= 0
    picked = logits.gather(-1, legal.clamp(min=0)).masked_fill(~valid, float("-inf"))
    return torch.where(valid.any(-1), logits.logsumexp(-1) - picked.logsumexp(-1), 0.0)


@dataclass(frozen=True)
class MaskedChoice:
    """Moves drawn for one position: the tokens, their moves, and whether the model's own
    (unmasked) argmax there was a legal move."""

    tokens: list[int]
    moves: list[str]
    legal_ids: list[int]
    unmasked_legal: bool


@torch.no_grad()
def last_logits(model: Any, rows: Sequence[Sequence[int]], batch: int = 64) -> torch.Tensor:
    """The next-token logits ``(B, V)`` after each tokenised prompt (left-padded, ``batch`` rows
    a forward pass; only the last position goes through the LM head)."""
    out = []
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        width = max(len(r) for r in part)
        ids = torch.tensor([[0] * (width - len(r)) + list(r) for r in part], device=model.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in part], device=model.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden = model.transformer(
            input_ids=ids, attention_mask=mask, position_ids=positions
        ).last_hidden_state
        out.append(model.lm_head(hidden[:, -1, :]).float().cpu())
    return torch.cat(out, 0)


def masked_moves(
    model: Any,
    tokenizer: Any,
    boards: Sequence[chess.Board],
    prompts: Sequence[Sequence[int]],
    spaced: Sequence[bool],
    *,
    n: int = 1,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    exclude: Sequence[Collection[str]] | None = None,
) -> list[MaskedChoice]:
    """``n`` legal moves for each position: the masked argmax when ``temperature`` is 0 (``n``
    times the same), else drawn from the masked policy at ``temperature``. ``prompts`` are the
    token ids that ask for each move (:func:`chessrl.lm.models.prompt_ids`). ``exclude[i]``: UCI
    moves left out of position ``i``'s choice unless nothing else is legal.

    >>> from chessrl.lm.models import build_model, prompt_ids
    >>> model, tok = build_model("tiny")
    >>> [c] = masked_moves(model, tok, [chess.Board()], [prompt_ids(tok, "")], [False], n=3, temperature=1.0)
    >>> all(chess.Move.from_uci(m) in chess.Board().legal_moves for m in c.moves), len(c.moves)
    (True, 3)
    """
    masked = MaskedMoves(tokenizer)
    logits = last_logits(model, prompts)
    legal = [masked.legal_ids(b, s) for b, s in zip(boards, spaced, strict=True)]
    allowed = legal
    if exclude is not None:
        allowed = []
        for ids, out in zip(legal, exclude, strict=True):
            kept = [t for t in ids if masked.move_of(t) not in out]
            allowed.append(kept or ids)
    table = pad_ids(allowed)
    logp = masked_log_softmax(logits, table, temperature if temperature > 0 else 1.0)
    if temperature > 0:
        picks = torch.multinomial(logp.exp(), n, replacement=True, generator=generator)
    else:
        picks = logp.argmax(-1, keepdim=True).expand(-1, n)
    argmax = logits.argmax(-1)
    out = []
    for b, ids in enumerate(legal):
        tokens = [allowed[b][int(k)] for k in picks[b]]
        out.append(MaskedChoice(tokens, [masked.move_of(t) for t in tokens], ids, int(argmax[b]) in set(ids)))
    return out


def masked_move(
    model: Any,
    tokenizer: Any,
    board: chess.Board,
    history: Sequence[str],
    fmt: TextFormat,
    *,
    temperature: float = 0.0,
    rng: random.Random | None = None,
    avoid_draw_claims: bool = False,
) -> MaskedChoice:
    """One position's masked move, asked in ``fmt`` (the game so far, or RookWorld's policy task).
    ``avoid_draw_claims``: no move after which the opponent could claim a draw (a threefold
    repetition, fifty moves) while another legal move exists: a deterministic player facing
    another would otherwise repeat the same moves until the game is drawn."""
    from chessrl.lm.models import prompt_ids

    generator = None
    if temperature > 0:
        generator = torch.Generator().manual_seed((rng or random.Random(0)).getrandbits(63))
    exclude = [draw_claim_moves(board)] if avoid_draw_claims else None
    [choice] = masked_moves(
        model,
        tokenizer,
        [board],
        [prompt_ids(tokenizer, fmt.prompt_for(board, list(history)))],
        [answer_spaced(fmt, history)],
        temperature=temperature,
        generator=generator,
        exclude=exclude,
    )
    return choice


def draw_claim_moves(board: chess.Board) -> set[str]:
    """The legal moves after which the side to move next could claim a draw (threefold
    repetition or fifty moves). Neither is possible within three plies of a capture or a pawn
    move, so those positions cost nothing.

    >>> b = chess.Board()
    >>> for m in ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1"]:
    ...     _ = b.push_uci(m)
    >>> sorted(draw_claim_moves(b))   # f6g8 brings back a position seen twice
    ['f6g8']
    """
    if board.halfmove_clock < 3:
        return set()
    out = set()
    for move in list(board.legal_moves):
        board.push(move)
        try:
            if board.can_claim_draw():
                out.add(move.uci())
        finally:
            board.pop()
    return out


def check_maskable(tokenizer: Any, where: str) -> None:
    """A :class:`MaskingError` naming ``where`` when ``tokenizer`` cannot be masked."""
    try:
        MaskedMoves(tokenizer)
    except MaskingError as exc:
        raise MaskingError(
            f"{where}: {exc}; use the chess tokenizer (the presets'), or play unmasked"
        ) from None
