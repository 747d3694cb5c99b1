"""Engine annotations (chessrl.engine.annotation) and the engine split over nodes, without Ray or
Stockfish: hand-made analyses, colour flips, the table's rows, the plan of shards."""

from __future__ import annotations

import random

import chess
import pyarrow as pa
import pytest

from actors.engine_pool import engine_split
from chessrl.data.positions import random_game_positions
from chessrl.engine.annotation import ANNOTATION_SCHEMA, Annotation, annotate, annotation_limit, mirror_rows
from chessrl.engine.client import Analysis, Line, Score


def _analysis(board: chess.Board, scores: dict[str, int]) -> Analysis:
    lines = tuple(Line(m, Score(cp=cp, mate=None), (m,)) for m, cp in scores.items())
    return Analysis(board.fen(), lines, nodes=1234)


def test_moves_ranked_best_first_with_values_from_the_side_to_move():
    # a hanging queen: the pawn's capture gets the highest value, and is first
    board = chess.Board("4k3/8/8/3q4/4P3/8/8/4K3 w - - 0 1")  # white pawn takes the queen on d5
    scores = {m.uci(): -900 for m in board.legal_moves}
    scores["e4d5"] = 850
    a = annotate(board, _analysis(board, scores))
    assert a.best_move == "e4d5" and a.cp[0] == 850 and a.value_cp == 850
    assert set(a.moves) == {m.uci() for m in board.legal_moves} and a.unscored == 0
    assert list(a.cp) == sorted(a.cp, reverse=True)
    assert a.expected[0] > 0.9 > 0.1 > a.expected[-1]
    assert a.nodes == 1234


def test_a_move_the_search_did_not_report_gets_the_worst_value_and_is_counted():
    board = chess.Board()
    a = annotate(board, _analysis(board, {"e2e4": 30, "d2d4": 25, "a2a3": -20}))
    assert len(a.moves) == 20 and a.unscored == 17
    assert a.moves[:3] == ("e2e4", "d2d4", "a2a3") and set(a.cp[3:]) == {-20}


def test_an_analysis_of_another_board_is_an_error():
    board = chess.Board()
    with pytest.raises(ValueError, match="not legal there"):
        annotate(board, _analysis(board, {"e2e4": 30, "e7e5": 0}))


def test_a_finished_game_has_no_moves_and_the_result_as_its_value():
    mated = chess.Board("7k/6Q1/6K1/8/8/8/8/8 b - - 0 1")
    a = annotate(mated, Analysis(mated.fen(), (), terminal="checkmate"))
    assert (a.moves, a.terminal, a.value_expected) == ((), "checkmate", 0.0)
    stalemate = chess.Board("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1")
    b = annotate(stalemate, Analysis(stalemate.fen(), (), terminal="stalemate"))
    assert (b.moves, b.terminal, b.value_expected) == ((), "stalemate", 0.5)


@pytest.mark.parametrize(
    "fen",
    [
        "r3k2r/pppq1ppp/2n2n2/3pp3/3PP3/2N2N2/PPPQ1PPP/R3K2R w KQkq d6 0 8",  # castling, en passant
        "8/1P4k1/8/8/8/8/6p1/4K3 b - - 0 60",  # promotions for both sides
    ],
)
def test_colour_flip_round_trips_and_keeps_every_move_legal(fen: str):
    board = chess.Board(fen)
    scores = {m.uci(): i for i, m in enumerate(board.legal_moves)}
    a = annotate(board, _analysis(board, scores))
    flipped = a.mirrored()
    mirror_board = chess.Board(flipped.fen)
    assert mirror_board.turn != board.turn
    assert {m.uci() for m in mirror_board.legal_moves} == set(flipped.moves)
    assert flipped.cp == a.cp and flipped.expected == a.expected
    assert flipped.mirrored() == a


def test_colour_flips_of_random_positions_round_trip():
    for p in random_game_positions(40, seed=11):
        board = chess.Board(p.fen)
        a = annotate(board, _analysis(board, {m.uci(): 0 for m in board.legal_moves}))
        assert a.mirrored().mirrored() == a
        assert set(a.mirrored().moves) == {m.uci() for m in chess.Board(a.mirrored().fen).legal_moves}


def test_rows_fit_the_schema_and_come_back_and_flip():
    board = chess.Board()
    a = annotate(
        board, _analysis(board, {m.uci(): random.Random(1).randint(-50, 50) for m in board.legal_moves})
    )
    row = a.row(source="games", game_id="g1", ply=0, phase="opening")
    table = pa.Table.from_pylist([row], schema=ANNOTATION_SCHEMA)
    back = Annotation.from_row(table.to_pylist()[0])
    assert back.moves == a.moves and back.cp == a.cp and back.value_cp == a.value_cp
    [flipped] = mirror_rows([row])
    assert flipped["source"] == "games+flip" and flipped["game_id"] == "g1"
    assert chess.Board(flipped["fen"]).turn == chess.BLACK


def test_the_search_budget_is_nodes_a_legal_move():
    assert annotation_limit(chess.Board("7k/8/8/8/8/8/8/K7 w - - 0 1"), 50).nodes == 150


def test_engines_split_over_nodes_never_exceed_a_node():
    assert engine_split(8, [4, 2, 2]) == [4, 2, 2]
    assert engine_split(2, [1, 1]) == [1, 1]  # the two-node test's cluster: one CPU each
    assert engine_split(3, [2, 3], 0.5) == [1, 2]  # in proportion to each node's room (4 and 6)
    for total in range(1, 8):
        split = engine_split(total, [3, 1, 4])
        assert sum(split) == total and all(s <= c for s, c in zip(split, [3, 1, 4], strict=True))
    with pytest.raises(ValueError, match="annotate.engines 9 .* ask for at most 8"):
        engine_split(9, [3, 1, 4], key="annotate.engines")


def test_the_lopsided_source_holds_won_positions_and_near_mates() -> None:
    """annotate's ``lopsided`` source: positions of greedy-against-random games, with their moves,
    far more often lopsided in material and with a mate in one on the board than random-mover
    games' positions."""
    from chessrl.data.positions import PIECE_VALUES, greedy_move
    from pipelines.annotate import AnnotateInputs, PositionSource, plan_shards
    from pipelines.config import AnnotateConfig

    def material(board: chess.Board) -> int:
        return sum(
            PIECE_VALUES[p.piece_type] * (1 if p.color == board.turn else -1)
            for p in board.piece_map().values()
        )

    def mate_in_one(board: chess.Board) -> bool:
        move = chess.Move.from_uci(greedy_move(board, random.Random(0)))
        board.push(move)
        mate = board.is_checkmate()
        board.pop()
        return mate

    cfg = AnnotateConfig(
        sources=["random", "lopsided"], positions=120, heldout_positions=0, shard_positions=120
    )
    source = PositionSource(cfg, AnnotateInputs(games=None, policy=None), 0.05, seed=7)
    rows = {plan.source: source.local(plan, "train") for plan in plan_shards(cfg)}
    assert {r["game_id"].split("-")[0] for r in rows["lopsided"]} == {"lopsided"} and len(
        rows["lopsided"]
    ) == 120
    for row in rows["lopsided"][:10]:  # each position is its game's board after its moves
        board = chess.Board()
        for move in row["history"].split():
            board.push_uci(move)
        assert board.fen() == row["fen"]
    share = {}
    for name, picked in rows.items():
        boards = [chess.Board(r["fen"]) for r in picked]
        share[name] = (
            sum(abs(material(b)) >= 9 for b in boards) / len(boards),
            sum(mate_in_one(b) for b in boards) / len(boards),
        )
    assert share["lopsided"][0] > 2 * share["random"][0] and share["lopsided"][0] > 0.3, share
    assert share["lopsided"][1] > share["random"][1], share


def test_the_engine_source_is_stockfish_beating_a_random_mover() -> None:
    """annotate's ``engine`` source: positions of Stockfish (few nodes, a little noise) against a
    random mover, each its game's board after its moves, seeded; the engine wins most games and
    far more positions are lopsided in material than in random-mover games."""
    from chessrl.data.positions import PIECE_VALUES, random_game_positions
    from chessrl.engine.engine_games import random_opponent_games, random_opponent_positions
    from chessrl.engine.group import EngineGroup
    from pipelines.annotate import AnnotateInputs, PositionSource, plan_shards
    from pipelines.config import AnnotateConfig

    cfg = AnnotateConfig(
        sources=["engine"], positions=24, heldout_positions=0, shard_positions=24, max_plies=120
    )
    with EngineGroup(1) as engines:

        def analyse(fens, limits, multipv):  # type: ignore[no-untyped-def]
            return engines.analyse(fens, limits, multipv=multipv, fresh=True)

        source = PositionSource(cfg, AnnotateInputs(games=None, policy=None), 0.05, seed=7)
        source.analyse = analyse
        rows = source.local(plan_shards(cfg)[0], "train")
        again = random_opponent_positions(24, seed=7 * 7919, analyse=analyse, max_plies=120)
        games = random_opponent_games(6, 3, analyse, max_plies=120)
    assert len(rows) == 24 and {r["game_id"].split("-")[0] for r in rows} == {"engine"}
    assert [r["fen"] for r in rows] == [p.fen for p in again]  # seeded: the same positions again
    for row in rows[:6]:
        board = chess.Board()
        for move in row["history"].split():
            board.push_uci(move)
        assert board.fen() == row["fen"] and board.legal_moves.count()
    ended = [chess.Board() for _ in games]
    for board, moves in zip(ended, games, strict=True):
        for move in moves:
            board.push_uci(move)
    assert sum(b.is_checkmate() for b in ended) >= 4, [len(g) for g in games]  # the engine mates

    def lopsided(fen: str) -> bool:
        board = chess.Board(fen)
        return (
            abs(sum(PIECE_VALUES[p.piece_type] * (1 if p.color else -1) for p in board.piece_map().values()))
            >= 9
        )

    chaos = random_game_positions(24, seed=7, max_plies=120)
    assert sum(lopsided(r["fen"]) for r in rows) > 2 * max(1, sum(lopsided(p.fen) for p in chaos))
