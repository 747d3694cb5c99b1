"""The chess tokenizer: every legal move is one token and round-trips; FENs round-trip as
characters (never as moves); it saves and loads through AutoTokenizer."""

from __future__ import annotations

import random

import chess
import pytest
from transformers import AutoTokenizer

from chessrl.lm.tokenizer import (
    CHARACTERS,
    MARKERS,
    RESULT_TOKENS,
    SPECIAL_TOKENS,
    all_uci_moves,
    build_chess_tokenizer,
)

# Corners: castling both ways for both colours, en passant, promotions and under-promotions
# (straight and capturing, both colours).
CORNER_FENS = [
    "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1",  # castling: e1g1 e1c1
    "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1",  # castling: e8g8 e8c8
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",  # en passant e5f6
    "1n2k3/P1P5/8/8/8/8/5p1p/K5N1 w - - 0 1",  # white promotes a7a8, a7b8, c7c8, c7b8
    "1n2k3/P1P5/8/8/8/8/5p1p/K5N1 b - - 0 1",  # black promotes f2f1, f2g1, h2h1, h2g1
]


@pytest.fixture(scope="module")
def tok():
    return build_chess_tokenizer()


def random_positions(n: int, seed: int) -> list[chess.Board]:
    """The corner positions, then every position along seeded random games, up to ``n``."""
    rng = random.Random(seed)
    boards: list[chess.Board] = [chess.Board(f) for f in CORNER_FENS]
    while len(boards) < n:
        board = chess.Board()
        while len(boards) < n and not board.is_game_over():
            board.push(rng.choice(list(board.legal_moves)))
            boards.append(board.copy(stack=False))
    return boards


def test_vocabulary_has_every_uci_move_once(tok) -> None:
    moves = all_uci_moves()
    assert len(moves) == len(set(moves)) == 1968
    vocab = tok.get_vocab()
    assert all(m in vocab and " " + m in vocab for m in moves)
    assert len(vocab) == 4 + 3 + 3 + len(set(CHARACTERS)) + 2 * 1968
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert all(m in vocab for m in (*MARKERS, *RESULT_TOKENS))


def test_every_legal_move_of_thousands_of_positions_is_one_token_and_round_trips(tok) -> None:
    boards = random_positions(3000, seed=1)
    pairs = [(board.fen(), move.uci()) for board in boards for move in board.legal_moves]
    encoded = tok([uci for _, uci in pairs], add_special_tokens=False)["input_ids"]
    decoded = tok.batch_decode(encoded)
    for (fen, uci), ids, text in zip(pairs, encoded, decoded, strict=True):
        assert len(ids) == 1 and ids[0] != tok.unk_token_id, (fen, uci)
        assert text == uci
    seen = {uci for _, uci in pairs}
    assert len(pairs) > 50_000
    # ... and with the space a game puts before it, still one token
    spaced = tok([" " + uci for _, uci in pairs[:5000]], add_special_tokens=False)["input_ids"]
    assert all(len(ids) == 1 and ids[0] != tok.unk_token_id for ids in spaced)
    assert tok.batch_decode(spaced) == [" " + uci for _, uci in pairs[:5000]]
    for corner in ("e1g1", "e1c1", "e8g8", "e8c8", "e5f6", "a7a8q", "a7b8n", "c7c8r", "f2f1b", "h2g1q"):
        assert corner in seen
    assert len(seen) > 1500  # the random walk covers most of the move space


def test_fens_round_trip_as_characters_never_as_moves(tok) -> None:
    moves = set(all_uci_moves())
    fens = [board.fen() for board in random_positions(2000, seed=2)]
    encoded = tok(fens, add_special_tokens=False)["input_ids"]
    for fen, ids, text in zip(fens, encoded, tok.batch_decode(encoded), strict=True):
        tokens = tok.convert_ids_to_tokens(ids)
        assert tok.unk_token not in tokens
        assert not moves.intersection(tokens), (fen, moves.intersection(tokens))
        assert text == fen


def test_a_fen_rank_that_spells_a_move_stays_characters(tok) -> None:
    fen = "3b1b2/8/8/8/8/8/8/K6k w - - 0 1"  # "b1b2" is also a UCI move
    assert "b1b2" not in tok.tokenize(fen)
    assert tok.tokenize("b1b2") == ["b1b2"]


def test_game_text_formats(tok) -> None:
    game = "e2e4 e7e5 g1f3 b8c6 1-0"
    assert tok.tokenize(game) == ["e2e4", " e7e5", " g1f3", " b8c6", " ", "1-0"]
    assert len(tok("e2e4 " * 99 + "e2e4", add_special_tokens=False)["input_ids"]) == 100  # one per move
    policy = "P: rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 M: e2e4"
    tokens = tok.tokenize(policy)
    assert tokens[0] == "P:" and tokens[-2:] == ["M:", " e2e4"]
    env = "A: 8/8/8/8/8/8/8/K6k w - - 0 1+a1b1++"
    assert tok.tokenize(env)[-4:] == ["+", "a1b1", "+", "+"]
    for text in (game, policy, env, "1/2-1/2", "0-1"):
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_saves_and_loads_with_auto_tokenizer(tok, tmp_path) -> None:
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert (loaded.bos_token, loaded.eos_token, loaded.pad_token, loaded.unk_token) == SPECIAL_TOKENS[1:3] + (
        SPECIAL_TOKENS[0],
        SPECIAL_TOKENS[3],
    )
    text = "e2e4 e7e5 P: 8/8/8/8/8/8/8/K6k w - - 0 1 M: a1b1"
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert len(loaded) == len(tok)
    batch = loaded(["e2e4", "e2e4 e7e5 g1f3"], padding=True)
    assert batch["input_ids"][0][-1] == loaded.pad_token_id  # pads on the right


# --- prompts through plain transformers: <bos> first, trailing whitespace dropped ---------------


def test_a_saved_tokenizer_starts_prompts_as_training_did(tok, tmp_path) -> None:
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for prompt in ("e2e4 e7e5", "e2e4 e7e5 ", "e2e4 e7e5  \n", "P: 8/8/8/8/8/8/8/K6k w - - 0 1 M:"):
        ids = loaded(prompt)["input_ids"]
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
        assert ids[1:] == tok(prompt.rstrip(), add_special_tokens=False)["input_ids"]
    assert loaded("")["input_ids"] == [tok.bos_token_id]  # the start position: a prompt of one token
    assert loaded("e2e4")["input_ids"] == loaded("e2e4 ")["input_ids"]
    # a leading space is text, not trailing whitespace: it stays
    assert loaded(" e2e4", add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(" e2e4")]


def _old_checkpoint_tokenizer(tmp_path):
    """A tokenizer saved the way checkpoints were before prompts carried their start token."""
    from tokenizers import processors

    old = build_chess_tokenizer()
    old.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="$A", pair="$A $B", special_tokens=[]
    )
    old.backend_tokenizer.normalizer = None
    old.save_pretrained(tmp_path)
    return AutoTokenizer.from_pretrained(tmp_path)


def test_an_old_checkpoints_tokenizer_is_upgraded_at_load(tmp_path) -> None:
    from chessrl.lm.checkpoints import load_tokenizer, make_tokenizer_config_generic

    raw = _old_checkpoint_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')  # a checkpoint folder
    assert raw("e2e4 ")["input_ids"] != raw("e2e4")["input_ids"]  # what users of old models got
    assert raw("e2e4")["input_ids"][0] != raw.bos_token_id
    upgraded = load_tokenizer(str(tmp_path))
    assert upgraded("e2e4 ")["input_ids"] == upgraded("e2e4")["input_ids"] == [upgraded.bos_token_id, 381]
    upgraded.save_pretrained(tmp_path / "new")
    make_tokenizer_config_generic(tmp_path / "new")
    again = AutoTokenizer.from_pretrained(tmp_path / "new")
    assert again("e2e4 ")["input_ids"] == [upgraded.bos_token_id, 381]


def test_a_gpt2_style_bpe_tokenizer_gets_its_endoftext_start_and_keeps_it(tmp_path) -> None:
    """A user's GPT-2 BPE (BOS = EOS = <|endoftext|>, byte-level): its start token comes first,
    byte-level decoding is unchanged, and saved as sft saves it, AutoTokenizer keeps both rules
    even where the config named transformers' GPT2Tokenizer (which rebuilds from the vocabulary)."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from chessrl.lm.checkpoints import make_tokenizer_config_generic
    from chessrl.lm.tokenizer import add_prompt_start

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        ["e2e4 e7e5 g1f3 b8c6"] * 10,
        trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False),
    )
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    plain = bpe("e2e4 e7e5")["input_ids"]
    add_prompt_start(add_prompt_start(bpe))  # twice: nothing doubles
    assert bpe("e2e4 e7e5 ")["input_ids"] == [bpe.eos_token_id, *plain]
    assert bpe.decode(bpe("e2e4 e7e5")["input_ids"], skip_special_tokens=True) == "e2e4 e7e5"
    bpe.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"})
    )
    assert make_tokenizer_config_generic(tmp_path) and not make_tokenizer_config_generic(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("e2e4 e7e5 ")["input_ids"] == [bpe.eos_token_id, *plain]
