"""Text formats: prompts, completions and parsing, with the chess tokenizer and with a BPE
tokenizer trained here (standing in for distilgpt2's, which cannot be downloaded)."""

from __future__ import annotations

import re

import chess
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from chessrl.data.pgn import read_pgn_file
from chessrl.lm.formats import (
    BoardFormat,
    FactsFormat,
    MoveCounts,
    MovesFormat,
    RookWorldFormat,
    get_format,
    parse_move,
)
from chessrl.lm.tokenizer import build_chess_tokenizer


@pytest.fixture(scope="module")
def games(pgn_dir) -> list[list[str]]:
    with open(pgn_dir / "lichess-2021-10-sample.pgn", "rb") as handle:
        records, _ = read_pgn_file(handle, "lichess")
    return [r.moves.split() for r in records[:150]]


@pytest.fixture(scope="module")
def bpe(games) -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE trained on game texts, as a user's checkpoint would bring."""
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"], show_progress=False)
    fmt = MovesFormat()
    core.train_from_iterator([fmt.game_text(g) for g in games], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")


@pytest.mark.parametrize("name", ["chess", "bpe"])
def test_prompt_plus_completion_tokenizes_like_the_training_text(name, games, bpe) -> None:
    tok = build_chess_tokenizer() if name == "chess" else bpe
    fmt = MovesFormat()
    checked = 0
    for moves in games[:40]:
        full = fmt.game_text(moves)
        for i in range(1, min(len(moves), 30)):
            prompt, completion = fmt.prompt(moves[:i]), fmt.completion(moves[:i], moves[i])
            assert (prompt + completion) == fmt.game_text(moves[: i + 1])
            assert full.startswith(prompt + completion)
            ids_prompt = tok(prompt, add_special_tokens=False)["input_ids"]
            ids_completion = tok(completion, add_special_tokens=False)["input_ids"]
            ids_joint = tok(prompt + completion, add_special_tokens=False)["input_ids"]
            assert ids_prompt + ids_completion == ids_joint, (name, prompt, completion)
            checked += 1
    assert checked > 500


def test_a_trailing_space_prompt_would_break_bpe_consistency(bpe) -> None:
    """Why the prompt has no trailing space: byte-level BPE glues the space to the next word."""
    prompt, move = "e2e4 e7e5 ", "g1f3"
    assert (
        bpe(prompt, add_special_tokens=False)["input_ids"] + bpe(move, add_special_tokens=False)["input_ids"]
        != bpe(prompt + move, add_special_tokens=False)["input_ids"]
    )


def test_parse_counts_legal_illegal_unparseable() -> None:
    board = chess.Board()
    counts = MoveCounts()
    for completion in (" e2e4", "g1f3 and more", " e2e5", "e1g1", " Nf3", "", "<eos>", "e7e8q"):
        counts.add(parse_move(board, completion))
    assert counts.counts == {"legal": 2, "illegal": 3, "unparseable": 3}
    assert counts.legal_rate == pytest.approx(2 / 8)


def test_parse_promotion_and_castling_in_their_positions() -> None:
    assert parse_move(chess.Board("8/P6k/8/8/8/8/8/K7 w - - 0 1"), " a7a8q").status == "legal"
    assert (
        parse_move(chess.Board("8/P6k/8/8/8/8/8/K7 w - - 0 1"), " a7a8").status == "illegal"
    )  # must promote
    assert parse_move(chess.Board("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"), "e1c1").move == "e1c1"


def test_rookworld_policy_and_environment_tasks() -> None:
    rw = RookWorldFormat()
    board = chess.Board()
    text = rw.policy_text(board, "e2e4")
    assert text == f"P: {chess.STARTING_FEN} M: e2e4"
    assert rw.parse(board, text[len(rw.policy_prompt(board)) :]).move == "e2e4"
    prompt = rw.env_prompt(board, "e2e4", history=["e2e4"])
    assert prompt == f"A: {chess.STARTING_FEN}+e2e4+e2e4+"
    assert rw.env_target(board, "e2e4") == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1+0+0+0"
    assert rw.env_target(chess.Board("k7/8/8/8/8/8/1Q6/7K w - - 0 1"), "h1g1").endswith("+0+0+0")
    assert rw.env_target(chess.Board("7k/5Q2/6K1/8/8/8/8/8 w - - 0 1"), "f7g7").endswith("+1+1+0")  # mate
    assert rw.env_target(chess.Board("k7/8/2Q5/8/8/8/8/7K w - - 0 1"), "c6b6").endswith(
        "+0.5+1+0"
    )  # stalemate
    tok = build_chess_tokenizer()
    for sample in (text, prompt + rw.env_target(board, "e2e4")):
        ids = tok(sample, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and tok.decode(ids) == sample


def test_format_names() -> None:
    assert get_format("moves").name == "moves" and get_format("rookworld").name == "rookworld"
    with pytest.raises(ValueError, match="unknown text format 'san'; formats: moves, rookworld"):
        get_format("san")


def test_conditioning_prefix_keeps_completions_consistent() -> None:
    fmt = MovesFormat()
    assert fmt.prompt([], prefix="1-0") == "1-0"
    assert fmt.completion([], "e2e4", prefix="1-0") == " e2e4"
    assert fmt.game_text(["e2e4"], prefix="1-0") == "1-0 e2e4"


# -- the facts format: what the rules say, on hand-made positions ---------------------------------


def _square(text: str, name: str) -> str:
    """The control character of square ``name`` in a facts prompt."""
    square = chess.parse_square(name)
    return text.split()[1][8 * (7 - chess.square_rank(square)) + chess.square_file(square)]


def _listed(text: str) -> dict[str, str]:
    """The listed moves of a facts prompt and their facts ("" for a safe quiet move)."""
    return {
        move: facts for facts, move in re.findall(r"(?: \[([^\]]*)\])? ([a-h][1-8][a-h][1-8][qrbn]?)", text)
    }


def test_facts_a_pinned_piece_defends_nothing_off_its_line_and_moves_only_along_it() -> None:
    # Black's knight on d7 is pinned by the rook on d1 to the king on d8; White to move
    board = chess.Board("3k4/3n4/8/4P3/8/8/8/3RK3 w - - 0 1")
    text = FactsFormat().policy_prompt(board)
    # the pinned knight attacks e5 and f6 on the board, but it may not leave the d-file: e5's pawn
    # is attacked by nobody, and its pushes are safe
    assert board.attackers(chess.BLACK, chess.E5) and _square(text, "e5") == "."
    assert _listed(text)["e5e6"] == "" and _listed(text)["d1d7"] == "n+-"  # Rxd7+, and the king retakes
    black = chess.Board("3k4/3n4/8/4P3/8/8/8/3RK3 b - - 0 1")
    listed = _listed(FactsFormat().policy_prompt(black))
    assert not any(m.startswith("d7") for m in listed)  # a pinned knight has no legal move at all


def test_facts_en_passant_is_a_pawn_capture() -> None:
    board = chess.Board("4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 2")
    text = FactsFormat().policy_prompt(board)
    assert _listed(text)["e5d6"] == "p" and text.split()[4] == "d6"  # en passant square shown, as in board


def test_facts_castling_through_check_is_not_offered_and_the_attacked_squares_show_why() -> None:
    # a black rook on f8 attacks f1: White may not castle short through it
    board = chess.Board("4kr2/8/8/8/8/8/8/4K2R w K - 0 1")
    text = FactsFormat().policy_prompt(board)
    assert "e1g1" not in _listed(text) and not board.is_legal(chess.Move.from_uci("e1g1"))
    assert _square(text, "f1") == "=" and _square(text, "g1") == "+"  # f1: both; g1: only White (the rook)
    assert not any(m.startswith("e1f1") for m in _listed(text))  # into the rook's file: not legal either


def test_facts_a_promotion_with_capture_check_and_mate() -> None:
    board = chess.Board("1r4k1/P4ppp/8/8/8/8/8/6K1 w - - 0 1")
    listed = _listed(FactsFormat().policy_prompt(board))
    assert listed["a7b8q"] == "r#"  # takes the rook, mates on the back rank
    assert listed["a7a8q"] == "-"  # the rook on b8 takes the new queen
    assert "a7a8n" in listed and listed["a7b8n"] == "r"  # a knight takes the rook, no check


def test_facts_mark_a_stalemating_move_in_the_listing_and_the_judged_text() -> None:
    # a queen and king against a bare king: Qc7 stalemates, Qb7 mates (the king guards b7)
    board = chess.Board("k7/8/1QK5/8/8/8/8/8 w - - 0 1")
    listed = _listed(FactsFormat().policy_prompt(board))
    assert listed["b6c7"] == "=" and listed["b6b7"] == "#" and listed["b6b5"] == ""
    assert " [=] " in FactsFormat().judged_text(board, "b6c7")
    assert " [=] " not in FactsFormat().judged_text(board, "b6b5")


def test_facts_every_prompt_is_tokens_of_the_chess_tokenizer_and_one_token_per_listed_move() -> None:
    from chessrl.lm.tokenizer import build_chess_tokenizer

    tok = build_chess_tokenizer()
    board = chess.Board("r1bqkb1r/pppp1ppp/2n2n2/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR w KQkq - 4 4")
    text = FactsFormat().policy_prompt(board)
    pieces = tok.tokenize(text)
    assert tok.unk_token not in pieces and " h5f7" in pieces and _listed(text)["h5f7"] == "p#"
    assert set(_listed(text)) == {m.uci() for m in board.legal_moves}  # every legal move, each once
    assert len(tok(text)["input_ids"]) < 300


def test_facts_judge_text_says_what_a_move_leaves_hanging_and_what_it_threatens() -> None:
    from chessrl.lm.tokenizer import build_chess_tokenizer

    # White: Qd1, Nc3 (defended by the b2 pawn), Ke1; Black: Ke8, a pawn on d7 defending e6
    board = chess.Board("4k3/3p4/8/8/8/2N5/1P6/3QK3 w - - 0 1")
    fmt = FactsFormat()
    judged = {m: fmt.judged_text(board, m).split()[-2:] for m in ("d1d6", "c3d5")}
    assert judged["d1d6"] == ["00", "d1d6"]  # the queen beside the pawn that cannot take it: safe
    assert judged["c3d5"] == ["00", "c3d5"]
    # Qxd7+? no: d7 is defended by the king, so the queen is lost (9) for a pawn, which the facts show
    take = fmt.judged_text(board, "d1d7")
    assert take.split()[-3:] == ["[p+-]", "90", "d1d7"]
    rook = chess.Board("4k3/8/8/8/7r/8/8/3QK3 w - - 0 1")  # a black rook on h4, defended by nothing
    assert fmt.judged_text(rook, "d1f2").split()[-2:] == ["05", "d1f2"]  # threatens it from safety
    assert fmt.judged_text(rook, "d1d4").split()[-2:] == ["95", "d1d4"]  # threatens it, on its rank
    assert fmt.judged_text(board, "d1d6").startswith(BoardFormat().policy_prompt(board)[:64])
    pieces = build_chess_tokenizer().tokenize(take)
    assert pieces[-1] == " d1d7" and "<unk>" not in pieces and len(pieces) < 160


def test_facts_judge_digits_count_only_captures_the_rules_allow() -> None:
    fmt = FactsFormat()
    # a double push past a pawn that takes en passant: the pawn can be taken, though not on e4
    ep = chess.Board("4k3/8/8/8/3p4/8/4P3/4K3 w - - 0 1")
    assert fmt.judged_text(ep, "e2e4").split()[-3:] == ["[-]", "10", "e2e4"]
    # the king defends d2 against the bishop, but not against the bishop and the rook behind it
    king = chess.Board("3rk3/8/8/8/1b6/8/3N3P/4K3 w - - 0 1")
    assert fmt.judged_text(king, "h2h3").split()[-2] == "30"
    # a mated side wins nothing; a side in check takes only what answers the check
    assert fmt.judged_text(chess.Board("6k1/5ppp/8/8/8/8/1Nq2PPP/3R2K1 w - - 0 1"), "d1d8").split()[
        -3:-1
    ] == [
        "[#]",
        "00",
    ]
    assert fmt.judged_text(chess.Board("4k2b/8/8/8/8/8/8/R2QK3 w - - 0 1"), "d1h5").split()[-2] == "03"


def test_facts_judge_digits_count_an_exchange_to_its_end() -> None:
    from chessrl.lm.formats import exposed

    # Black's knight on d5, defended by the queen only, attacked by a bishop and a rook: Bxd5 wins
    # it, as Qxd5 would lose the queen to Rxd5 (one capture alone would call it defended: 3 - 3)
    board = chess.Board("3qk3/8/8/3n4/8/1B6/8/3RK3 w - - 0 1")
    assert exposed(board, chess.BLACK) == 3
    # with a pawn on e6 defending too, it holds: Bxd5 exd5 Rxd5 Qxd5 loses White material
    assert exposed(chess.Board("3qk3/8/4p3/3n4/8/1B6/8/3RK3 w - - 0 1"), chess.BLACK) == 0


def test_facts_judge_balance_counts_what_a_move_wins_and_the_room_it_makes() -> None:
    from chessrl.lm.formats import balance

    fmt = FactsFormat()
    # Qxd7+ wins a pawn and loses the queen to the king: -8; Nd5 wins nothing and loses nothing
    board = chess.Board("4k3/3p4/8/8/8/2N5/1P6/3QK3 w - - 0 1")
    assert fmt.judged_text(board, "d1d7").split()[-4][:2] == "-8"
    assert fmt.judged_text(board, "c3d5").split()[-4][:2] == "+0"
    # a promotion wins the new piece less the pawn; en passant wins a pawn
    assert balance(chess.Board("8/4P3/8/8/8/8/k7/4K3 w - - 0 1"), chess.Move.from_uci("e7e8q"))[:2] == "+8"
    ep = chess.Board("4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1")
    assert balance(ep, chess.Move.from_uci("e5d6"))[:2] == "+1"
    # room: developing a knight to the centre opens more than a rook's pawn step or a knight to the rim
    start = chess.Board()
    rooms = {m: int(balance(start, chess.Move.from_uci(m))[2]) for m in ("e2e4", "a2a3", "g1h3")}
    assert rooms["e2e4"] > rooms["a2a3"] and rooms["e2e4"] > rooms["g1h3"]
