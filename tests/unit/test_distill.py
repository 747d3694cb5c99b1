"""Distillation from annotated positions (sft --annotations): the soft target of a hand-made
position puts the mass where Stockfish's values put it (a hanging queen: on its capture), the
packed blocks carry it at the token that predicts the move, and a few steps of the loss teach it
to a tiny model."""

from __future__ import annotations

import chess
import numpy as np
import torch

from chessrl.engine.move_value import annotated_values
from chessrl.lm.formats import BoardFormat, FactsFormat
from chessrl.lm.legality import (
    TARGET_TEMPERATURE,
    MoveTokens,
    lm_and_soft_move_loss,
    pad_legal_targets,
    soft_targets,
)
from chessrl.lm.models import build_model
from pipelines.sft_data import annotated_blocks

HANGING = "4k3/8/8/3q4/4P3/8/8/R3K3 w Q - 0 1"  # exd5 wins the queen
MATE_OR_QUEEN = "6k1/5ppp/8/8/8/7q/5PPP/3R2K1 w - - 0 1"  # Rd8 mates, gxh3 wins the queen


def _batch(flip: bool = False) -> tuple[dict, object, MoveTokens]:
    board = chess.Board(HANGING)
    moves = ["e4d5"] + sorted(m.uci() for m in board.legal_moves if m.uci() != "e4d5")
    expected = [0.97] + [0.2] * (len(moves) - 1)
    _, tok = build_model("tiny")
    batch = {
        "fen": np.array([HANGING], dtype=object),
        "moves": np.array([moves], dtype=object),
        "expected": np.array([expected], dtype=object),
    }
    return batch, tok, MoveTokens(tok)


def test_the_capture_of_a_hanging_queen_gets_the_mass():
    weights = soft_targets([0.97] + [0.2] * 20, 0.05)
    assert weights[0] > 0.999 and abs(float(weights.sum()) - 1) < 1e-5


def test_the_margin_target_puts_the_mass_on_the_mate_where_expected_is_flat():
    """Rd8# (expected 1.0) beside gxh3 winning the queen (0.998): the expected scale splits the
    mass between them; the margin scale (its default temperature) puts it on the mate, and the
    queen's capture still far above the quiet moves."""
    board = chess.Board(MATE_OR_QUEEN)
    moves = ["d1d8", "g2h3"] + sorted(m.uci() for m in board.legal_moves if m.uci() not in ("d1d8", "g2h3"))
    cp, expected = [99_999, 950] + [-900] * (len(moves) - 2), [1.0, 0.998] + [0.02] * (len(moves) - 2)
    batch = {
        "fen": np.array([MATE_OR_QUEEN], dtype=object),
        "moves": np.array([moves], dtype=object),
        "cp": np.array([cp], dtype=object),
        "expected": np.array([expected], dtype=object),
    }
    _, tok = build_model("tiny")
    legal = MoveTokens(tok)

    def weights(scale: str) -> np.ndarray:
        out = annotated_blocks(batch, tok, 256, legal, TARGET_TEMPERATURE[scale], flip=False, scale=scale)
        return out["legal_weights"][0]

    flat, margin = weights("expected"), weights("margin")
    assert abs(flat[0] - flat[1]) < 0.05 and flat[0] + flat[1] > 0.99, flat[:2]
    assert margin[0] > 0.95 and margin[1] > 100 * margin[2:].max(), margin[:3]
    assert annotated_values(cp[:2], expected[:2], "expected") == [1.0, 0.998]


def test_facts_examples_and_their_flips_are_computed_from_the_board():
    """In the facts format each example's prompt is the facts of its board, the flip's of the
    flipped board (not the text flipped); an example longer than a block is left out and counted,
    so the run can refuse it (check_fits) instead of learning a cut prompt."""
    batch, tok, moves = _batch()
    out = annotated_blocks(batch, tok, 512, moves, 0.05, flip=True, text_format="facts", scale="expected")
    ids, length = out["input_ids"][0], int(out["length"][0])
    starts = [i for i in range(length) if ids[i] == tok.bos_token_id]
    spans = list(zip(starts, [*starts[1:], length], strict=True))
    texts = [tok.decode([int(t) for t in ids[a:b]], skip_special_tokens=True) for a, b in spans]
    facts, mirrored = FactsFormat(), chess.Board(HANGING).mirror()
    assert texts == [facts.policy_text(chess.Board(HANGING), "e4d5"), facts.policy_text(mirrored, "e5d4")]
    assert out["truncated"][0] == 0 and out["longest"][0] == max(b - a for a, b in spans)
    short = annotated_blocks(batch, tok, 100, moves, 0.05, flip=True, text_format="facts", scale="expected")
    assert short["truncated"][0] == 2 and short["longest"][0] == out["longest"][0] and short["length"][0] == 0


def test_blocks_carry_the_soft_target_where_the_move_is_predicted():
    batch, tok, moves = _batch()
    out = annotated_blocks(batch, tok, 256, moves, 0.05, flip=True, scale="expected")
    assert len(out["input_ids"]) == 1  # the position and its flip fit one block
    ids, counts, length = out["input_ids"][0], out["legal_counts"][0], out["length"][0]
    at = np.flatnonzero(counts)
    assert len(at) == 2 and out["legal_moves"][0].shape == out["legal_weights"][0].shape == (
        2 * counts[at[0]],
    )
    first = int(at[0])
    assert ids[first + 1] == moves.token(chess.Move.from_uci("e4d5"))  # the token after is the best move
    assert tok.decode([int(ids[first])]).strip() == "M:"
    assert out["targets"][0][first + 1] == 1 and out["targets"][0][first] == 0  # the answer alone
    flipped = int(at[1])  # the mirrored position's best move: e5xd4 for black
    assert ids[flipped + 1] == moves.token(chess.Move.from_uci("e5d4"))
    assert ids[length - 1] == tok.eos_token_id and length == flipped + 3  # two whole examples
    text = tok.decode([int(i) for i in ids[1 : first + 2]])
    assert text.replace(" ", "").startswith(
        BoardFormat().policy_prompt(chess.Board(HANGING)).replace(" ", "")[:64]
    )


def test_a_few_steps_of_the_soft_loss_teach_the_capture():
    batch, tok, moves = _batch()
    out = annotated_blocks(batch, tok, 128, moves, 0.05, flip=False, scale="expected")
    torch.manual_seed(0)
    model, _ = build_model("tiny", seed=3)
    ids = torch.from_numpy(out["input_ids"].astype(np.int64))
    labels = torch.where(torch.from_numpy(out["targets"]).bool(), ids, torch.tensor(-100))
    legal = torch.from_numpy(pad_legal_targets([out["legal_moves"][0]], [out["legal_counts"][0]]))
    weights = torch.from_numpy(
        pad_legal_targets([out["legal_weights"][0]], [out["legal_counts"][0]], fill=0.0, dtype=np.float32)
    )
    at = int(np.flatnonzero(out["legal_counts"][0])[0])
    capture = moves.token(chess.Move.from_uci("e4d5"))

    def p_capture() -> float:
        with torch.no_grad():
            return float(model(ids).logits[0, at].softmax(-1)[capture])

    before = p_capture()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(15):
        loss, _, soft, mass = lm_and_soft_move_loss(model(ids).logits, labels, legal, weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert p_capture() > 0.5 > before, (before, p_capture())
    assert float(mass) > 0.5  # the legal moves hold the mass now


def test_whole_game_blocks_put_each_ply_s_target_before_its_move():
    """A 3-ply game annotated at every ply (the moves format): the slot at token t holds the
    legal moves of ply t (the plain form at the start, the spaced one after), and the token after
    it is the move played there."""
    from pipelines.sft_data import annotated_game_blocks, annotated_games

    played = ["e2e4", "e7e5", "g1f3"]
    board, rows = chess.Board(), []
    for ply in range(4):
        legal = sorted(m.uci() for m in board.legal_moves)
        rows.append(
            {
                "game_id": "g",
                "ply": ply,
                "history": " ".join(played[:ply]),
                "moves": legal,
                "expected": [0.5] * len(legal),
            }
        )
        if ply < 3:
            board.push_uci(played[ply])
    _, tok = build_model("tiny")
    moves = MoveTokens(tok)
    [game] = annotated_games(list(reversed(rows)))  # any order: chained by ply
    assert game["moves"] == played and game["plies"] == [0, 1, 2, 3]
    batch = {k: np.array([game[k]], dtype=object) for k in ("moves", "plies", "legal", "expected")}
    out = annotated_game_blocks(batch, tok, 64, moves, 0.05, scale="expected")
    ids, counts = out["input_ids"][0], out["legal_counts"][0]
    assert out["length"][0] == 4 and list(np.flatnonzero(counts)) == [0, 1, 2, 3]
    assert [int(c) for c in counts[:4]] == [len(r["moves"]) for r in rows]
    flat, at = out["legal_moves"][0].tolist(), 0
    for t, row in enumerate(rows):
        slot = flat[at : at + len(row["moves"])]
        assert slot == [moves.token(chess.Move.from_uci(m), spaced=t > 0) for m in row["moves"]]
        if t < 3:
            assert int(ids[t + 1]) in slot and int(ids[t + 1]) == moves.token(
                chess.Move.from_uci(played[t]), spaced=t > 0
            )
        at += len(row["moves"])
    assert out["targets"][0][1:4].tolist() == [1, 1, 1] and out["targets"][0][0] == 0
