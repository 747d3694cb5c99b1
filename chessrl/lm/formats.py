"""Text formats for chess language models, tokenizer-agnostic.

``moves`` (the default): a game is its UCI moves separated by spaces. The prompt is the moves so
far *without* a trailing space and the completion is the next move *with* its leading space, so
prompt + completion is exactly the training text; BPE tokenizers (GPT-2's ``Ġe2e4``-style
pieces) then see the same pieces at training and at inference.

>>> fmt = MovesFormat()
>>> fmt.prompt(["e2e4", "e7e5"]), fmt.completion(["e2e4", "e7e5"], "g1f3")
('e2e4 e7e5', ' g1f3')
>>> fmt.parse(chess.Board(), " e2e4 e7e5")
ParsedMove(move='e2e4', status='legal', text='e2e4')

``rookworld`` (RookWorld-LM's format): a policy task ``P: <FEN> M: <move>`` and an environment
task ``A: <FEN>+<move>+<history>+`` whose target is ``<next FEN>+<reward>+<terminated>+<truncated>``.

>>> rw = RookWorldFormat()
>>> rw.policy_prompt(chess.Board()) + rw.policy_completion("e2e4")
'P: rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 M: e2e4'

A completion is legal when its first word is a legal UCI move in the position; otherwise it is
``illegal`` (a well-formed move that is not legal there) or ``unparseable``. Nothing is masked.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import chess

UCI_MOVE = re.compile(r"^[a-h][1-8][a-h][1-8][qrbn]?$")
MoveStatus = Literal["legal", "illegal", "unparseable"]


@dataclass(frozen=True)
class ParsedMove:
    """A completion read as a move: the move (when legal), its status, and the word read."""

    move: str | None
    status: MoveStatus
    text: str


def parse_move(board: chess.Board, completion: str) -> ParsedMove:
    """The first word of ``completion`` as a UCI move in ``board``.

    >>> parse_move(chess.Board(), "e2e5").status, parse_move(chess.Board(), "Nf3").status
    ('illegal', 'unparseable')
    """
    words = completion.split()
    word = words[0] if words else ""
    if not UCI_MOVE.match(word):
        return ParsedMove(move=None, status="unparseable", text=word)
    move = chess.Move.from_uci(word)
    if move not in board.legal_moves:
        return ParsedMove(move=None, status="illegal", text=word)
    return ParsedMove(move=word, status="legal", text=word)


@dataclass
class MoveCounts:
    """Legal / illegal / unparseable tallies (the legal-move rate's numerator and denominator)."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, parsed: ParsedMove) -> None:
        self.counts[parsed.status] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def legal_rate(self) -> float:
        return self.counts["legal"] / self.total if self.total else 0.0


class MovesFormat:
    """``e2e4 e7e5 g1f3 ...``; optional conditioning prefix (e.g. the result) before the moves."""

    name = "moves"

    def game_text(self, moves: Sequence[str], prefix: str = "") -> str:
        """The training text of a whole game: every move is a target."""
        body = " ".join(moves)
        return f"{prefix} {body}".strip() if prefix else body

    def prompt(self, moves_so_far: Sequence[str], prefix: str = "") -> str:
        return self.game_text(moves_so_far, prefix)

    def completion(self, moves_so_far: Sequence[str], move: str, prefix: str = "") -> str:
        return f" {move}" if (moves_so_far or prefix) else move

    def parse(self, board: chess.Board, completion: str) -> ParsedMove:
        return parse_move(board, completion)

    def prompt_for(self, board: chess.Board, moves_so_far: Sequence[str]) -> str:
        """The prompt that asks for the next move of a game (the moves so far)."""
        return self.prompt(moves_so_far)


class PositionFormat:
    """A format that asks for a move from the position alone (``policy_prompt``, then
    `` <move>``): what RookWorld's policy task and the board format share."""

    name = ""

    def policy_prompt(self, board: chess.Board) -> str:
        raise NotImplementedError

    def policy_completion(self, move: str) -> str:
        return f" {move}"

    def policy_text(self, board: chess.Board, move: str) -> str:
        return self.policy_prompt(board) + self.policy_completion(move)

    def parse(self, board: chess.Board, completion: str) -> ParsedMove:
        return parse_move(board, completion)

    def prompt_for(self, board: chess.Board, moves_so_far: Sequence[str]) -> str:
        """The policy task for the position (the moves that led there are not shown)."""
        return self.policy_prompt(board)

    def judged_text(self, board: chess.Board, move: str) -> str:
        """What a reward model in this format reads to judge ``move`` in ``board``: the
        position and the move (:class:`BoardAfterFormat` reads the position after it)."""
        return self.policy_text(board, move)


class RookWorldFormat(PositionFormat):
    """RookWorld-LM's policy (``P:``) and environment (``A:``) tasks."""

    name = "rookworld"

    def policy_prompt(self, board: chess.Board) -> str:
        return f"P: {board.fen()} M:"

    def env_prompt(self, board: chess.Board, move: str, history: Sequence[str] = ()) -> str:
        """``A: <FEN>+<move>+<recent moves>+``: the environment task's input."""
        return f"A: {board.fen()}+{move}+{' '.join(history)}+"

    def env_target(self, board: chess.Board, move: str) -> str:
        """``<next FEN>+<reward>+<terminated>+<truncated>`` for a legal ``move`` in ``board``.

        Reward from the mover's side: 1 for a mate, 0.5 for a move that ends the game drawn,
        0 otherwise.

        >>> RookWorldFormat().env_target(chess.Board("7k/5Q2/6K1/8/8/8/8/8 w - - 0 1"), "f7g7")
        '7k/6Q1/6K1/8/8/8/8/8 b - - 1 1+1+1+0'
        """
        after = board.copy(stack=False)
        after.push_uci(move)
        outcome = after.outcome(claim_draw=False)
        if outcome is None:
            reward, terminated = "0", "0"
        elif outcome.winner is None:
            reward, terminated = "0.5", "1"
        else:
            reward, terminated = "1", "1"
        return f"{after.fen()}+{reward}+{terminated}+0"


class BoardFormat(PositionFormat):
    """The position in a fixed-length encoding, answered by the move: ``<64 squares> <side>
    <castling> <en passant> M:`` → `` <move>``. Square ``i`` of the board (a8, b8, ..., h1) is
    always the ``i``-th character after ``<bos>`` (a piece letter, ``.`` for an empty square),
    one token each with the chess tokenizer, as searchless_chess encodes a FEN: a small model
    reads where every piece stands instead of rebuilding the board from the moves.

    >>> BoardFormat().policy_prompt(chess.Board())
    'rnbqkbnrpppppppp................................PPPPPPPPRNBQKBNR w KQkq - M:'
    >>> BoardFormat().policy_text(chess.Board(), "e2e4")[-8:]
    ' M: e2e4'
    """

    name = "board"

    def policy_prompt(self, board: chess.Board) -> str:
        squares = "".join(
            (p.symbol() if (p := board.piece_at(chess.square(f, r))) else ".")
            for r in range(7, -1, -1)
            for f in range(8)
        )
        ep = (
            chess.square_name(board.ep_square)
            if board.ep_square is not None and board.has_legal_en_passant()
            else "-"
        )
        return f"{squares} {'w' if board.turn == chess.WHITE else 'b'} {board.castling_xfen() or '-'} {ep} M:"


class BoardAfterFormat(BoardFormat):
    """A judge's format: the board *after* the move (a capture, a hung piece or a mate is on the
    squares it reads), then the move that was played: ``<64 squares after> <side to move>
    <castling> <en passant> M: <move>``. The score is the mover's (the side not to move on the
    board shown). Policies are not asked in it: as a policy format it is the board format.

    >>> text = BoardAfterFormat().judged_text(chess.Board(), "e2e4")
    >>> text[32:40], text[48:56], text.split()[1], text.endswith("M: e2e4")   # rank 4, rank 2, black to move
    ('....P...', 'PPPP.PPP', 'b', True)
    """

    name = "board-after"

    def judged_text(self, board: chess.Board, move: str) -> str:
        after = board.copy(stack=False)
        after.push_uci(move)
        return self.policy_prompt(after) + self.policy_completion(move)


def control(board: chess.Board) -> str:
    """Who controls each square (a8, b8, ..., h1), from the side to move's view, as the rules
    decide: ``+`` only the side to move attacks it, ``-`` only the opponent, ``=`` both, ``.``
    neither. A piece pinned to its king attacks only along its pin (it may not leave the line),
    so it defends nothing else. Read with the board: the side to move's piece on ``-`` hangs
    (attacked, not defended); the opponent's piece on ``+`` can be taken for free.

    >>> c = control(chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"))   # White's rook eyes the queen
    >>> c[8 * 3 + 3], c[8 * 6 + 3]           # d5 (the queen: free to take), d2 (the rook: attacked, defended)
    ('+', '=')
    """
    us = board.turn
    out = []
    for rank in range(7, -1, -1):
        for file in range(8):
            square = chess.square(file, rank)
            ours, theirs = (_attacked(board, colour, square) for colour in (us, not us))
            out.append("=" if ours and theirs else "+" if ours else "-" if theirs else ".")
    return "".join(out)


def _attacked(board: chess.Board, colour: chess.Color, square: chess.Square) -> bool:
    """Whether a piece of ``colour`` attacks ``square`` along a line it may move on (a piece
    pinned to its own king only along the pin)."""
    return any(square in board.pin(colour, a) for a in board.attackers(colour, square))


def move_facts(board: chess.Board, move: chess.Move) -> str:
    """What the rules say of a legal ``move``: the piece it captures (its symbol), ``+`` for a
    check, ``#`` for a mate or ``=`` for a stalemate (a draw: against a random mover, the won
    games a judge without the mark let slip), ``-`` where the opponent can then take the piece
    that moved; empty for a safe quiet move.

    >>> b = chess.Board("6k1/5ppp/8/8/8/8/2q2PPP/3R2K1 w - - 0 1")
    >>> move_facts(b, chess.Move.from_uci("d1d8")), move_facts(b, chess.Move.from_uci("d1c1")), move_facts(b, chess.Move.from_uci("h2h3"))
    ('#', '-', '')
    >>> move_facts(chess.Board("k7/8/1QK5/8/8/8/8/8 w - - 0 1"), chess.Move.from_uci("b6c7"))  # Qc7 stalemates
    '='
    """
    captured = board.piece_at(move.to_square)
    if board.is_en_passant(move):
        captured = chess.Piece(chess.PAWN, not board.turn)
    after = board.copy(stack=False)
    after.push(move)
    replies = list(after.legal_moves)  # once: mate, stalemate and what can take all read them
    in_check = after.is_check()
    check = ("#" if not replies else "+") if in_check else ("=" if not replies else "")
    taken = any(
        reply.to_square == move.to_square
        or (after.is_en_passant(reply) and reply.to_square ^ 8 == move.to_square)
        for reply in replies
    )
    return (captured.symbol() if captured else "") + check + ("-" if taken else "")


#: Material a piece is worth to :func:`exposed` (the king is never won: 0).
PIECE_VALUES = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9, chess.KING: 0}


def exchange(board: chess.Board, square: chess.Square, side: chess.Color) -> int:
    """What ``side`` wins by starting the captures on ``square`` (a static exchange: each side
    takes back with its least valuable attacker, pieces behind the ones that leave join in, and
    either side stops where going on loses; a king takes only on a square no enemy piece still
    covers; pins are not looked at); 0 when it should not start.

    >>> b = chess.Board("3rk3/8/8/3p4/8/8/3R4/3RK3 w - - 0 1")     # Rxd5 Rxd5 Rxd5: a pawn up
    >>> exchange(b, chess.D5, chess.WHITE), exchange(chess.Board("4k3/8/4p3/3p4/8/8/8/3QK3 w - - 0 1"), chess.D5, chess.WHITE)
    (1, 0)
    """
    b = board.copy(stack=False)
    gains: list[int] = []
    victim, turn = b.piece_at(square), side
    while victim is not None:
        takers = [
            a
            for a in b.attackers(turn, square)
            if b.piece_type_at(a) != chess.KING or not b.attackers(not turn, square)
        ]
        if not takers:
            break
        taker = min(takers, key=lambda a: PIECE_VALUES[b.piece_type_at(a) or chess.PAWN] or 99)
        gains.append(PIECE_VALUES[victim.piece_type] - (gains[-1] if gains else 0))
        victim = b.remove_piece_at(taker)
        b.set_piece_at(square, victim)  # type: ignore[arg-type]
        turn = not turn
    while len(gains) > 1:  # from the last capture back: a side takes only when it pays
        last = gains.pop()
        gains[-1] = min(gains[-1], -last)
    return max(gains[0], 0) if gains else 0


def exposed(board: chess.Board, colour: chess.Color, legal: bool = False) -> int:
    """The most material the other side wins by starting an :func:`exchange` on one of
    ``colour``'s pieces. With ``legal`` (the other side to move) only where its first capture is
    legal: en passant included, none when it is mated, only what answers a check.

    >>> exposed(chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"), chess.BLACK)    # the queen hangs
    9
    >>> exposed(chess.Board("4k3/4p3/3q4/8/8/8/3R4/4K3 w - - 0 1"), chess.BLACK)  # defended: 9 - 5
    4
    >>> exposed(chess.Board("4k3/8/8/8/3pP3/8/8/4K3 b - e3 0 1"), chess.WHITE, legal=True)  # en passant
    1
    """
    if legal:
        best = 0
        for m in board.generate_legal_captures():
            if board.is_en_passant(m):
                best = max(best, 1 - (1 if board.attackers(colour, m.to_square) else 0))
            elif board.piece_type_at(m.to_square) != chess.KING:
                best = max(best, exchange(board, m.to_square, not colour))
        return best
    squares = [sq for sq, p in board.piece_map().items() if p.color == colour and p.piece_type != chess.KING]
    return max((exchange(board, sq, not colour) for sq in squares), default=0)


def consequences(board: chess.Board, move: chess.Move) -> str:
    """Two digits of what a legal ``move`` leaves on the board, by :func:`exposed`: the material
    the opponent can then win from the mover by an exchange its legal captures start (what the
    move leaves hanging, the piece it moved included; 0 after a mate), and what the mover then
    threatens to win if the opponent does nothing (0-9 each, clipped).

    >>> b = chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")
    >>> consequences(b, chess.Move.from_uci("d2d5")), consequences(b, chess.Move.from_uci("d2a2"))
    ('00', '50')
    >>> consequences(b, chess.Move.from_uci("d2d4"))   # rook and queen face each other, neither defended
    '59'
    """
    return _digits(*outlook(board, move))


def _digits(loss: int, threat: int, *_: int) -> str:
    return f"{min(loss, 9)}{min(threat, 9)}"


def mobility(board: chess.Board, colour: chess.Color) -> int:
    """How many moves ``colour`` would have if it were its turn (pseudo-legal: the rules' count of
    what its pieces can reach, checks not looked at; no en passant).

    >>> mobility(chess.Board(), chess.WHITE), mobility(chess.Board(), chess.BLACK)
    (20, 20)
    """
    b = board.copy(stack=False)
    b.turn, b.ep_square = colour, None
    return b.pseudo_legal_moves.count()


def outlook(board: chess.Board, move: chess.Move) -> tuple[int, int, int, int]:
    """What a legal ``move`` does to material and room, by the rules alone: ``(loss, threat, gain,
    room)``. ``loss`` and ``threat`` as :func:`consequences` reads them; ``gain`` the material it
    takes (en passant a pawn; a promotion adds the new piece less the pawn) less ``loss``;
    ``room`` how much it widens the mover's :func:`mobility` against the opponent's, from before
    the move to after it (each side's count less the other's).

    >>> outlook(chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"), chess.Move.from_uci("d2d4"))[:3]
    (5, 9, -5)
    >>> outlook(chess.Board(), chess.Move.from_uci("e2e4"))[3], outlook(chess.Board(), chess.Move.from_uci("g1h3"))[3]
    (10, 0)
    """
    after = board.copy(stack=False)
    after.push(move)
    us = board.turn
    loss, threat = exposed(after, us, legal=True), exposed(after, not us)
    taken = board.piece_type_at(move.to_square) or (chess.PAWN if board.is_en_passant(move) else None)
    won = (PIECE_VALUES[taken] if taken else 0) + (PIECE_VALUES[move.promotion] - 1 if move.promotion else 0)
    room = (mobility(after, us) - mobility(after, not us)) - (mobility(board, us) - mobility(board, not us))
    return loss, threat, won - loss, room


def balance(board: chess.Board, move: chess.Move) -> str:
    """What a legal ``move`` wins and how much room it makes, as :func:`outlook` counts them, in
    three characters: the gain signed (``+3``, ``-9``: clipped to 9) then the room as a digit
    (5 for none, 3 moves a step: 0 to 9).

    >>> balance(chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"), chess.Move.from_uci("d2d5"))
    '+99'
    >>> balance(chess.Board(), chess.Move.from_uci("e2e4")), balance(chess.Board(), chess.Move.from_uci("g1h3"))
    ('+08', '+05')
    """
    return _balance(*outlook(board, move))


def _balance(_loss: int, _threat: int, gain: int, room: int) -> str:
    return f"{'-' if gain < 0 else '+'}{min(abs(gain), 9)}{max(0, min(9, round(room / 3) + 5))}"


class FactsFormat(BoardFormat):
    """The board format plus what a rules engine computes of the position (never an engine's
    evaluation), so a small model reads attacks instead of working them out from raw squares:
    ``<64 squares> <64 control> <side> <castling> <en passant>`` then every legal move (UCI
    order), each after its facts when it has any (:func:`move_facts`: a capture, a check, mate or
    stalemate, a destination the opponent can take on): `` [<facts>] <move>`` or `` <move>``, then ``M:``.
    The control row is :func:`control`'s. Every character is one token of the chess tokenizer and
    each listed move is the very token the answer is (`` <move>``, with its space), read after its
    facts: the model picks a move by pointing at it. About 150-300 tokens a position.

    >>> text = FactsFormat().policy_prompt(chess.Board("6k1/5ppp/8/8/8/8/2q2PPP/3R2K1 w - - 0 1"))
    >>> text.split()[1][8 * 7 + 2], text.split()[2:5], " d1d7 [#] d1d8 d1e1 " in text
    ('=', ['w', '-', '-'], True)
    >>> " [-] d1c1" in text, " h2h3" in text                                      # Rc1 hangs; h3 is quiet
    (True, True)
    """

    name = "facts"

    def policy_prompt(self, board: chess.Board) -> str:
        board_text = super().policy_prompt(board)[: -len(" M:")]
        squares, rest = board_text[:64], board_text[64:]
        listed = "".join(
            f" [{facts}] {m.uci()}" if (facts := move_facts(board, m)) else f" {m.uci()}"
            for m in sorted(board.legal_moves, key=chess.Move.uci)
        )
        return f"{squares} {control(board)}{rest}{listed} M:"

    def judged_text(self, board: chess.Board, move: str) -> str:
        """What a judge in this format reads for ``move``: the board and its control row as the
        policy reads them, then only that move: what it wins and the room it makes
        (:func:`balance`), its facts (:func:`move_facts`, ``.`` for none) and its
        :func:`consequences`, so what is judged sits next to the score read at the last token:
        ``<64 squares> <64 control> <side> <castling> <en passant> <balance> [<facts>] <lost><threatened> <move>``.

        >>> text = FactsFormat().judged_text(chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"), "d2d4")
        >>> text[-22:], FactsFormat().judged_text(chess.Board(), "g1f3")[-23:]
        (' w - - -56 [-] 59 d2d4', ' w KQkq - +06 . 00 g1f3')
        """
        position = super().policy_prompt(board)[: -len(" M:")]
        chosen = chess.Move.from_uci(move)
        facts, seen = move_facts(board, chosen), outlook(board, chosen)
        return (
            f"{position[:64]} {control(board)}{position[64:]} {_balance(*seen)}"
            f" {f'[{facts}]' if facts else '.'} {_digits(*seen)} {move}"
        )


TextFormat = MovesFormat | RookWorldFormat | BoardFormat | BoardAfterFormat | FactsFormat

FORMATS: dict[str, type[MovesFormat] | type[RookWorldFormat] | type[BoardFormat]] = {
    "moves": MovesFormat,
    "rookworld": RookWorldFormat,
    "board": BoardFormat,
    "board-after": BoardAfterFormat,
    "facts": FactsFormat,
}


def get_format(name: str) -> TextFormat:
    """``moves`` or ``rookworld``; anything else names the choices."""
    try:
        return FORMATS[name]()
    except KeyError:
        raise ValueError(f"unknown text format {name!r}; formats: {', '.join(FORMATS)}") from None
