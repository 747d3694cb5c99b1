"""Preference pairs, Ray-free: the pair rule on hand-made positions (margins, mates, illegal and
unparseable proposals, duplicates), the invalid-share cap, position sampling and phases, and the
Parquet schema."""

from __future__ import annotations

import chess
import pyarrow as pa
import pytest

from chessrl.arena.suites import CP_CAP
from chessrl.rl.preferences import (
    PREFERENCE_SCHEMA,
    PairRule,
    cap_invalid_share,
    game_phase,
    make_pairs,
    missing_columns,
    position_from_moves,
    sample_positions,
)

OPENING = position_from_moves("g", 2, ("e2e4", "e7e5", "g1f3"), source="train")


def test_phases_by_move_number_and_material() -> None:
    assert game_phase(chess.Board()) == "opening"
    middlegame = chess.Board("r1bq1rk1/pp2bppp/2n1pn2/3p4/3P4/2NBPN2/PP3PPP/R2QK2R w KQ - 0 11")
    assert game_phase(middlegame) == "middlegame"
    # 13 pieces (kings and pawns count) is an endgame whatever the move number
    endgame = chess.Board("6k1/5ppp/8/8/8/8/PPP2PPP/6K1 w - - 0 5")
    assert len(endgame.piece_map()) == 11 and game_phase(endgame) == "endgame"


def test_the_pair_rule_by_hand() -> None:
    rule = PairRule(margin_cp=50)
    rows, skipped = make_pairs(
        OPENING,
        "g1f3",
        35,
        ["g1f3", " b1c3", "d2d4 junk", "a2a3", "a2a3", "h2h5", "", "e1g1"],
        {"b1c3": 30, "d2d4": -15, "a2a3": -16},
        rule,
    )
    # b1c3 is 5 below (within the margin); d2d4 is 50 below (exactly the margin: a pair); a2a3 66 below
    assert [(r["rejected"], r["kind"], r["rejected_score"]) for r in rows] == [
        (" d2d4", "worse", -15),
        (" a2a3", "worse", -16),
        (" h2h5", "illegal", -CP_CAP),
        (" ", "unparseable", -CP_CAP),
        (" e1g1", "illegal", -CP_CAP),
    ]
    assert skipped == {"agrees": 1, "within_margin": 1, "duplicate": 1}
    for r in rows:
        assert r["chosen"] == " g1f3" and r["chosen_score"] == 35 and r["prompt"] == "e2e4 e7e5"
        assert r["chosen_score"] - r["rejected_score"] >= rule.margin_cp
        assert (r["fen"], r["game_id"], r["ply"], r["phase"], r["source"]) == (
            OPENING.fen,
            "g",
            2,
            "opening",
            "train",
        )


def test_mates_are_capped_on_both_sides() -> None:
    # the best move mates (its score is the cap); a legal move that allows mate is at the floor
    rows, _ = make_pairs(
        OPENING, "g1f3", 10 * CP_CAP, ["a2a3", "b2b3"], {"a2a3": -5 * CP_CAP, "b2b3": CP_CAP}, PairRule(50)
    )
    assert [(r["chosen_score"], r["rejected_score"]) for r in rows] == [(CP_CAP, -CP_CAP)]


def test_margin_zero_keeps_every_different_legal_move_and_negative_is_refused() -> None:
    rows, skipped = make_pairs(OPENING, "g1f3", 20, ["b1c3"], {"b1c3": 20}, PairRule(0))
    assert len(rows) == 1 and not skipped
    with pytest.raises(ValueError, match="margin_cp must be >= 0"):
        PairRule(-1)


def test_the_first_move_of_a_game_has_no_leading_space() -> None:
    start = position_from_moves("s", 0, ("e2e4",), source="heldout")
    rows, _ = make_pairs(start, "e2e4", 30, ["a2a4"], {"a2a4": -40}, PairRule(50))
    assert (rows[0]["prompt"], rows[0]["chosen"], rows[0]["rejected"]) == ("", "e2e4", "a2a4")
    assert rows[0]["source"] == "heldout"


@pytest.mark.parametrize(
    ("valid", "invalid", "share", "kept_invalid"),
    [(10, 10, 0.5, 10), (10, 10, 0.2, 2), (0, 5, 0.3, 0), (4, 2, 0.0, 0), (3, 9, 1.0, 9)],
)
def test_the_invalid_share_cap(valid: int, invalid: int, share: float, kept_invalid: int) -> None:
    rows = [{"kind": "worse", "i": i} for i in range(valid)] + [
        {"kind": "illegal", "i": 100 + i} for i in range(invalid)
    ]
    kept, dropped = cap_invalid_share(rows, share, seed=3)
    bad = [r for r in kept if r["kind"] != "worse"]
    assert len(bad) == kept_invalid and dropped == invalid - kept_invalid
    assert len(kept) - len(bad) == valid and len(bad) <= share * len(kept) + 1e-9
    assert [r["i"] for r in kept] == sorted(r["i"] for r in kept)  # order kept
    assert cap_invalid_share(rows, share, seed=3) == (kept, dropped)  # seeded
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cap_invalid_share(rows, 1.5, seed=0)


def test_sampled_positions_are_distinct_legal_and_reproducible() -> None:
    games = [{"game_id": f"g{i}", "moves": "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6"} for i in range(4)]
    positions = sample_positions(games, 10, seed=5, source="train")
    assert len(positions) == 10 and len({(p.game_id, p.ply) for p in positions}) == 10
    assert positions == sample_positions(games, 10, seed=5, source="train")
    assert positions != sample_positions(games, 10, seed=6, source="train")
    for p in positions:
        board = chess.Board()
        for uci in p.moves_before:
            board.push_uci(uci)
        assert board.fen() == p.fen and p.source == "train" and 0 <= p.ply < 6
    # more positions asked than the games hold: every position once, no more
    assert len(sample_positions(games, 100, seed=5, source="train")) == 24
    assert sample_positions([{"game_id": "x", "moves": ""}], 3, seed=0, source="train") == []


def test_rows_fit_the_schema_and_missing_columns_are_named() -> None:
    rows, _ = make_pairs(OPENING, "g1f3", 35, ["a2a3"], {"a2a3": -100}, PairRule(50))
    table = pa.Table.from_pylist(rows, schema=PREFERENCE_SCHEMA)
    assert table.num_rows == 1 and table.schema == PREFERENCE_SCHEMA
    assert missing_columns(table.column_names) == []
    assert missing_columns(["prompt", "rejected"]) == ["chosen"]


def test_ranked_pairs_order_the_policy_s_own_legal_moves():
    pos = position_from_moves("g", 3, ("e2e4", "e7e5"), source="train")
    scores = {"f1c4": 30, "a2a3": -20, "g1e2": -25, "d1h5": -300}
    proposals = ["g1f3", "f1c4", "a2a3", "g1e2", "d1h5", "e1e3"]
    plain, _ = make_pairs(pos, "g1f3", 40, proposals, scores, PairRule(margin_cp=50))
    rows, skipped = make_pairs(pos, "g1f3", 40, proposals, scores, PairRule(margin_cp=50, ranked=True))
    # the pairs with Stockfish's move are unchanged; the rest order the legal proposals that are
    # 50 cp or more apart: f1c4 (30) > a2a3 (-20), f1c4 > g1e2 (-25), and all three > d1h5 (-300);
    # a2a3 vs g1e2 (5 cp apart) makes none, and g1f3 (Stockfish's) is never paired twice
    assert rows[: len(plain)] == plain
    ranked = [(r["chosen"].strip(), r["rejected"].strip()) for r in rows[len(plain) :]]
    assert ranked == [
        ("f1c4", "a2a3"),
        ("f1c4", "g1e2"),
        ("f1c4", "d1h5"),
        ("a2a3", "d1h5"),
        ("g1e2", "d1h5"),
    ]
    assert all(
        r["kind"] == "ranked" and r["chosen_score"] - r["rejected_score"] >= 50 for r in rows[len(plain) :]
    )
    assert dict(skipped) == {"agrees": 1, "within_margin": 1}


def test_the_invalid_share_cap_counts_ranked_pairs_as_valid():
    rows = [{"kind": "ranked"}] * 3 + [{"kind": "illegal"}] * 5
    kept, dropped = cap_invalid_share(rows, 0.25, seed=0)
    assert (len(kept), dropped) == (4, 4)


def test_random_moves_pair_with_stockfish_s_move_and_join_the_ranking():
    pos = position_from_moves("g", 3, ("e2e4", "e7e5"), source="train")
    scores = {"f1c4": 30, "a2a3": -20, "g2g4": -150}
    rows, _ = make_pairs(
        pos, "g1f3", 40, ["f1c4", "a2a3"], scores, PairRule(margin_cp=50, ranked=True), extra=["g2g4"]
    )
    kinds = [(r["chosen"].strip(), r["rejected"].strip(), r["kind"]) for r in rows]
    # g2g4 (-150) is 190 cp below Stockfish's g1f3: a "random" pair; it also ranks below f1c4 and a2a3
    assert ("g1f3", "g2g4", "random") in kinds
    assert ("f1c4", "g2g4", "ranked") in kinds and ("a2a3", "g2g4", "ranked") in kinds
    assert ("g1f3", "a2a3", "worse") in kinds


def test_a_judge_chooses_its_best_legal_move_even_one_no_proposal_named() -> None:
    """``preferences --judge model``: the judge's argmax over every legal move is chosen, proposals
    the margin below it are rejected, an unparseable one is marked, a random legal move nobody
    proposed is paired with it, and a finished game makes no pair."""
    from chessrl.rl.preferences import position_from_moves
    from pipelines.preferences import judge_pairs

    class Judge:  # a move to d8 is worth 5, any other move 0
        def score_batch(self, queries):
            return [5.0 if q.move.endswith("d8") else 0.0 for q in queries]

    opening = ["e2e4", "e7e5", "d1h5", "b8c6", "f1c4", "g8f6"]
    mated = [*opening, "h5f7"]  # scholar's mate: black has no move
    hung = ["d2d4", "e7e5", "d4e5", "d8g5", "c1g5", "f8e7", "g5e7", "g8f6"]  # Bd8 is the one move to d8
    positions = [position_from_moves(g, len(m), m, source="train") for g, m in (("m", mated), ("h", hung))]
    rows, skipped = judge_pairs(
        positions, [[], [" a2a3", " e7d8", " e1d2", " z9z9"]], Judge(), PairRule(margin_cp=50), random_moves=1
    )
    assert skipped["terminal"] == 1 and {r["game_id"] for r in rows} == {"h"}
    assert {r["chosen"] for r in rows} == {" e7d8"} and skipped["agrees"] == 1
    kinds = {r["rejected"].strip(): r["kind"] for r in rows}
    assert (
        kinds.pop("a2a3") == "worse" and kinds.pop("e1d2") == "worse" and kinds.pop("z9z9") == "unparseable"
    )
    assert list(kinds.values()) == ["random"]  # one random legal move nobody proposed
    assert all(r["chosen_score"] == 500 for r in rows)
    assert all(r["rejected_score"] == 0 for r in rows if r["kind"] != "unparseable")
