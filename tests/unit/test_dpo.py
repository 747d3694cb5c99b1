"""dpo's own arithmetic, Ray-free: a completion's log-probability against a direct computation
(one row at a time, batched and right-padded alike), the held-out accuracies by hand (ties count
half in the choice accuracy, never in DPO's reward accuracy, as TRL counts it), and a pair's ids
in the moves and board formats."""

from __future__ import annotations

import chess
import pytest
import torch

from chessrl.lm.formats import BoardFormat, MovesFormat
from chessrl.lm.models import build_model, prompt_ids
from chessrl.rl.dpo import choice_accuracy, completion_logps, implicit_accuracy, pair_ids, position_of


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    model, tokenizer = build_model("tiny")
    return model.eval(), tokenizer


def next_token_logp(model, ids: list[int], token: int) -> float:
    """log p(token | ids): the last position's log-softmax, from a forward pass over ``ids`` alone."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return float(torch.log_softmax(logits, -1)[token])


def test_completion_logps_equal_a_direct_computation(lm):
    model, tok = lm
    prompt = prompt_ids(tok, "e2e4 e7e5")
    one = tok.convert_tokens_to_ids([" g1f3"])
    two = tok.convert_tokens_to_ids([" g1f3", " b8c6"])
    # a 1-token completion: the log-softmax at the prompt's last position, at the move's token
    expected_one = next_token_logp(model, prompt, one[0])
    # a 2-token completion: the chain rule, each factor from its own prefix (no padding, no batch)
    expected_two = next_token_logp(model, prompt, two[0]) + next_token_logp(model, prompt + two[:1], two[1])
    # ... and read off one pass over prompt + completion at positions len(prompt)-1 and len(prompt)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + two])).logits[0].float(), -1)
    at = len(prompt) - 1
    assert float(logp[at, two[0]] + logp[at + 1, two[1]]) == pytest.approx(expected_two, abs=1e-5)

    got = completion_logps(model, [(prompt, one), (prompt, two)], tok.pad_token_id)
    assert got == pytest.approx([expected_one, expected_two], abs=1e-5)
    assert all(v < 0 for v in got) and got[1] < got[0]


def test_completion_logps_batched_and_right_padded_equal_one_row_at_a_time(lm):
    model, tok = lm
    rows = [
        (prompt_ids(tok, ""), tok.convert_tokens_to_ids(["e2e4"])),
        (prompt_ids(tok, "e2e4 e7e5 g1f3"), tok.convert_tokens_to_ids([" b8c6", " f1b5"])),
        (prompt_ids(tok, "d2d4"), tok.convert_tokens_to_ids([" d7d5"])),
        (prompt_ids(tok, "e2e4 c7c5 g1f3 d7d6 d2d4"), tok.convert_tokens_to_ids([" c5d4"])),
    ]
    alone = [completion_logps(model, [row], tok.pad_token_id)[0] for row in rows]
    assert completion_logps(model, rows, tok.pad_token_id) == pytest.approx(alone, abs=1e-5)
    assert completion_logps(model, rows, tok.pad_token_id, batch=3) == pytest.approx(alone, abs=1e-5)
    assert completion_logps(model, [], tok.pad_token_id) == []
    model.train()  # the caller's mode comes back
    completion_logps(model, rows[:1], tok.pad_token_id)
    assert model.training
    model.eval()


def test_choice_accuracy_by_hand():
    # wins 1, 0, tie 0.5: 1.5 / 3
    assert choice_accuracy([-1.0, -2.0, -1.0], [-2.0, -1.0, -1.0]) == pytest.approx(0.5)
    # tie 0.5, win 1: 1.5 / 2
    assert choice_accuracy([0.0, 0.0], [0.0, -1.0]) == pytest.approx(0.75)
    assert choice_accuracy([-3.0], [-0.5]) == 0.0
    assert choice_accuracy([], []) is None


def test_implicit_accuracy_by_hand():
    # margins (c - rc) - (r - rr): (1) - (-1) = 2 > 0; 0 - 0 = 0 (a tie is not a win, as TRL counts
    # rewards/accuracies); (-1) - (1) = -2: 1 / 3
    chosen, rejected = [-1.0, -2.0, -3.0], [-3.0, -2.0, -1.0]
    ref = [-2.0, -2.0, -2.0]
    assert implicit_accuracy(chosen, rejected, ref, ref) == pytest.approx(1 / 3)
    # the chosen move less likely than the rejected one, yet risen more from the reference:
    # wrong for a player that picks the likelier move, right for DPO's implicit reward
    assert choice_accuracy([-3.0], [-1.0]) == 0.0
    assert implicit_accuracy([-3.0], [-1.0], [-5.0], [-1.0]) == 1.0  # (-3+5) - (-1+1) = 2
    assert implicit_accuracy([], [], [], []) is None


def test_moves_format_pair_ids(lm):
    _, tok = lm
    ids = pair_ids(tok, MovesFormat(), "e2e4 e7e5", None, " g1f3", " f1a6")
    assert ids is not None
    assert ids.prompt == prompt_ids(tok, "e2e4 e7e5")
    assert tok.convert_ids_to_tokens(ids.chosen + ids.rejected) == [" g1f3", " f1a6"]
    assert ids.prompt + ids.chosen == prompt_ids(tok, "e2e4 e7e5 g1f3")
    # the format puts the space, whatever the table's text has
    assert pair_ids(tok, MovesFormat(), "e2e4 e7e5", None, "g1f3", "f1a6") == ids
    # a game's first move: the start token alone, a move with no leading space
    first = pair_ids(tok, MovesFormat(), "", None, " e2e4", "d2d4")
    assert first is not None and first.prompt == prompt_ids(tok, "") == [tok.bos_token_id]
    assert tok.convert_ids_to_tokens(first.chosen + first.rejected) == ["e2e4", "d2d4"]


def test_board_format_pair_ids(lm):
    _, tok = lm
    after = chess.Board()
    for uci in ("e2e4", "e7e5"):
        after.push_uci(uci)
    ids = pair_ids(tok, BoardFormat(), "e2e4 e7e5", None, " g1f3", "f1a6")
    assert ids is not None
    assert ids.prompt == prompt_ids(tok, BoardFormat().policy_prompt(after))
    assert tok.convert_ids_to_tokens(ids.prompt)[-2:] == [" ", "M:"]
    assert tok.convert_ids_to_tokens(ids.chosen + ids.rejected) == [" g1f3", " f1a6"]
    # a prompt that is not a legal move list: the position is the fen's
    sicilian = "rnbqkbnr/pp1ppppp/8/2p5/4P3/8/PPPP1PPP/RNBQKBNR w KQkq c6 0 2"
    from_fen = pair_ids(tok, BoardFormat(), "P: something else M:", sicilian, " g1f3", " d1h5")
    assert from_fen is not None
    assert from_fen.prompt == prompt_ids(tok, BoardFormat().policy_prompt(chess.Board(sicilian)))
    assert tok.convert_ids_to_tokens(from_fen.chosen) == [" g1f3"]
    assert position_of("P: something else M:", sicilian) is not None


def test_pair_ids_none_for_an_empty_completion_or_no_position(lm):
    _, tok = lm
    assert pair_ids(tok, MovesFormat(), "e2e4", None, "  ", " d7d5") is None
    assert pair_ids(tok, BoardFormat(), "e2e4", None, " e7e5", "") is None
    # an illegal move list and no fen, or a fen that is no position
    assert pair_ids(tok, MovesFormat(), "e2e4 e2e4", None, " e7e5", " d7d5") is None
    assert pair_ids(tok, BoardFormat(), "e2e4 e2e4", "not a fen", " e7e5", " d7d5") is None
    no_kings = "8/8/8/8/8/8/8/8 w - - 0 1"
    assert pair_ids(tok, BoardFormat(), "zz", no_kings, " e7e5", " d7d5") is None


def test_a_moves_format_pair_needs_the_moves_that_reach_its_position(lm) -> None:
    """A row whose prompt is not the move list that reaches its FEN (an imported table) has no
    moves-format prompt: left out, never asked as the opening position. The board format reads
    the FEN itself."""
    _, tok = lm
    after_e4 = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
    assert pair_ids(tok, MovesFormat(), "P: x M:", after_e4, " e7e5", " d7d5") is None
    assert pair_ids(tok, MovesFormat(), "", after_e4, " e7e5", " d7d5") is None
    assert pair_ids(tok, MovesFormat(), "e2e4", after_e4, " e7e5", " d7d5") is not None
    board = pair_ids(tok, BoardFormat(), "", after_e4, " e7e5", " d7d5")
    assert board is not None and "P...........PPPP.PPP" in tok.decode(board.prompt, skip_special_tokens=True)


def test_the_lines_name_who_chose_the_pairs(tmp_path):
    """Pairs `preferences --judge model` ranked are the judge's choice, not Stockfish's: the
    table's summary says so, and dpo's lines follow it (a table with no summary: Stockfish)."""
    import json

    from cluster.storage import Storage
    from pipelines.common.artifacts import pairs_chooser
    from pipelines.dpo import summary_lines

    table = Storage.from_uri(str(tmp_path))
    assert pairs_chooser(table) == "Stockfish"
    (tmp_path / "summary.json").write_text(json.dumps({"phase": "preferences", "judge": "model"}))
    assert pairs_chooser(table) == "the judge"
    (tmp_path / "summary.json").write_text("{not json")
    assert pairs_chooser(table) == "Stockfish"
    summary = {
        "train_pairs": 10,
        "kinds": ["worse"],
        "heldout_pairs": 2,
        "left_out_pairs": 0,
        "seconds": 1.0,
        "steps": 1,
        "resumed_from_step": None,
        "loss_type": "sigmoid",
        "beta": 0.1,
        "loss": 0.5,
        "train_reward_accuracy": 0.5,
        "heldout_choice_accuracy": 0.75,
        "reference_heldout_choice_accuracy": 0.5,
        "heldout_reward_accuracy": 0.5,
        "reference": "p",
        "policy": "p",
        "quality": {},
        "train_pairs_per_s": 1.0,
        "model": "m",
        "chooser": "the judge",
    }
    assert any("the judge's move the likelier on 75.0%" in line for line in summary_lines(summary, 0))
