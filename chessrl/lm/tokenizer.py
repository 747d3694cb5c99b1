"""The chess tokenizer: one token per UCI move (all 1968), single characters for FEN and text,
task markers and special tokens, as a Hugging Face ``PreTrainedTokenizerFast``.

>>> tok = build_chess_tokenizer()
>>> tok.tokenize("e2e4 e7e5 e7e8q")
['e2e4', ' e7e5', ' e7e8q']
>>> tok.tokenize("P: 8/8/8/8/8/8/8/K6k w - - 0 1 M: a1b1")[:5]
['P:', ' ', '8', '/', '8']
>>> tok.decode(tok("e2e4 e7e5")["input_ids"])
'<bos>e2e4 e7e5'

``tok(prompt)`` starts with ``<bos>``, as every training text did, and trailing whitespace is
ignored, so ``tok(prompt)`` -> ``model.generate`` is the whole recipe for a move, through
``transformers`` alone (see :func:`add_prompt_start`):

>>> tok("e2e4 e7e5 ")["input_ids"] == tok("e2e4 e7e5")["input_ids"] == [tok.bos_token_id, 381, 3525]
True

Text is split by one regular expression: a UCI move only where it stands alone (not inside a FEN
rank such as ``3b1b2``: the look-behind and look-ahead exclude letters, digits and ``/``), then the
markers and results, then any single character. A move carries the one space before it, so each
move of a game is one token (``" e7e5"``; the vocabulary holds every move with and without that
space) and a game costs half the positions it would with separate space tokens. Other spaces are
tokens of their own, so decoding gives back exactly the text that was encoded, less any trailing
whitespace (``add_special_tokens=False`` leaves the ``<bos>`` out). Save it with ``save_pretrained(dir)`` and load it with
``AutoTokenizer.from_pretrained(dir)``; a user's own checkpoint brings its own tokenizer instead.
"""

from __future__ import annotations

import chess
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
#: RookWorld task markers: policy ``P: <FEN> M: <move>``, environment ``A: <FEN>+<move>+...``.
MARKERS: tuple[str, ...] = ("P:", "M:", "A:")
RESULT_TOKENS: tuple[str, ...] = ("1-0", "0-1", "1/2-1/2")
#: Every single character a FEN, a RookWorld line or a conditioning prefix can hold.
CHARACTERS: str = " pnbrqkPNBRQK/0123456789abcdefghw-+:.*=#x[]()TFELOR"

_NOT_WORD = "A-Za-z0-9/"
_MOVE = rf" ?(?<![{_NOT_WORD}])[a-h][1-8][a-h][1-8][qrbn]?(?![{_NOT_WORD}])"
_RESULT = rf"(?<![{_NOT_WORD}])(?:1/2-1/2|1-0|0-1)(?![{_NOT_WORD}-])"
_MARKER = "|".join(m.replace(":", r"\:") for m in MARKERS)
SPLIT_PATTERN = rf"{_MOVE}|{_RESULT}|{_MARKER}|."


def all_uci_moves() -> list[str]:
    """The 1968 UCI move strings: queen-like and knight moves from every square (1792), plus
    promotions to q, r, b, n from the 7th and 2nd ranks, straight and capturing (176).

    >>> moves = all_uci_moves()
    >>> len(moves), moves[:2], "e7e8q" in moves, "e1g1" in moves
    (1968, ['a1b1', 'a1c1'], True, True)
    """
    moves: list[str] = []
    for frm in chess.SQUARES:
        for to in chess.SQUARES:
            if frm == to:
                continue
            df = abs(chess.square_file(frm) - chess.square_file(to))
            dr = abs(chess.square_rank(frm) - chess.square_rank(to))
            if df == 0 or dr == 0 or df == dr or {df, dr} == {1, 2}:
                moves.append(chess.square_name(frm) + chess.square_name(to))
    for from_rank, to_rank in ((6, 7), (1, 0)):
        for file in range(8):
            for to_file in (file - 1, file, file + 1):
                if 0 <= to_file < 8:
                    base = chess.square_name(chess.square(file, from_rank)) + chess.square_name(
                        chess.square(to_file, to_rank)
                    )
                    moves.extend(base + piece for piece in "qrbn")
    return moves


def chess_vocabulary() -> dict[str, int]:
    """Token -> id: special tokens, markers, results, characters, the moves, then the moves with
    their leading space.

    >>> vocab = chess_vocabulary()
    >>> len(vocab), vocab["<pad>"], " e2e4" in vocab
    (3995, 0, True)
    """
    vocab: dict[str, int] = {}
    moves = all_uci_moves()
    for token in (*SPECIAL_TOKENS, *MARKERS, *RESULT_TOKENS, *CHARACTERS, *moves, *(" " + m for m in moves)):
        vocab.setdefault(token, len(vocab))
    return vocab


def build_chess_tokenizer(model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """The chess tokenizer, ready for ``save_pretrained``."""
    core = Tokenizer(models.WordLevel(chess_vocabulary(), unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.padding_side = "right"
    return add_prompt_start(tokenizer)


def start_token(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The token every training text starts with: BOS, or EOS for GPT-2-style tokenizers whose
    BOS is missing (``<|endoftext|>`` serves as both there)."""
    return tokenizer.bos_token if tokenizer.bos_token is not None else tokenizer.eos_token


def add_prompt_start(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Make ``tokenizer(text)`` encode text the way the phases train on it, in place: the start
    token (:func:`start_token`) first, through the tokenizer's post-processor, and trailing
    whitespace dropped by its normalizer (a prompt ``"e2e4 e7e5 "`` is ``"e2e4 e7e5"``). Both
    live in ``tokenizer.json``, so a saved model answers through ``AutoTokenizer`` +
    ``generate`` alone. Any fast tokenizer: the chess one and a user's BPE alike (a byte-level
    post-processor is kept in front). Safe to call again; a slow tokenizer is returned unchanged.

    >>> from transformers import PreTrainedTokenizerFast
    >>> raw = PreTrainedTokenizerFast(tokenizer_object=build_chess_tokenizer().backend_tokenizer)
    >>> raw.eos_token = "<eos>"
    >>> add_prompt_start(raw)("e2e4 ")["input_ids"]
    [2, 381]
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    start = start_token(tokenizer)
    if backend is None or start is None:
        return tokenizer
    start_id = tokenizer.convert_tokens_to_ids(start)
    template = processors.TemplateProcessing(
        single=f"{start} $A", pair=f"{start} $A $B:1", special_tokens=[(start, start_id)]
    )
    current = backend.post_processor
    if isinstance(current, processors.ByteLevel):
        backend.post_processor = processors.Sequence([current, template])
    elif not _is_our_template(current):
        backend.post_processor = template
    strip = normalizers.Strip(left=False, right=True)
    norm = backend.normalizer
    if norm is None:
        backend.normalizer = strip
    elif "Strip" not in repr(norm):
        backend.normalizer = normalizers.Sequence([norm, strip])
    return tokenizer


def _is_our_template(processor: object) -> bool:
    return isinstance(processor, processors.Sequence) and "TemplateProcessing" in repr(processor)
