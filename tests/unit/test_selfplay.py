"""Self-play games, replay shards and the batched arena (no Ray)."""

from __future__ import annotations

import io

import chess
import numpy as np
import pyarrow.parquet as pq
import pytest

from chessrl.arena.batched_arena import SearchSide, match_record, play_batched_match
from chessrl.arena.game import Opening, random_openings
from chessrl.search.board_encoding import input_channels, move_to_index
from chessrl.search.mcts import MCTSConfig, NetworkEvaluator, UniformEvaluator
from chessrl.search.network import NetConfig, PolicyValueNet
from chessrl.search.replay import (
    REPLAY_SCHEMA,
    list_shards,
    positions_table,
    read_shards,
    shard_path,
    write_shard,
)
from chessrl.search.selfplay import SelfPlay, SelfPlaySettings, material_balance
from cluster.storage import Storage


def _play(n: int = 3, **settings: int) -> list:
    cfg = SelfPlaySettings(**{"concurrent_games": 2, "max_plies": 10, "history": 1, **settings})
    return SelfPlay(UniformEvaluator(), MCTSConfig(simulations=4), cfg, seed=3).play(n)


def test_selfplay_positions_match_the_moves_and_results() -> None:
    games = _play(3, max_plies=12, adjudicate_material=0)
    assert len(games) == 3
    for game in games:
        assert len(game.positions) == len(game.moves) == 12
        board = chess.Board()
        for ply, (move, pos) in enumerate(zip(game.moves, game.positions, strict=True)):
            assert pos.ply == ply
            assert pos.planes.shape == (input_channels(1), 8, 8)
            # the played move is among the searched moves, and the visit shares sum to 1
            assert abs(float(pos.policy_probs.sum()) - 1.0) < 1e-5
            assert move_to_index(board, chess.Move.from_uci(move)) in set(pos.policy_indices.tolist())
            board.push_uci(move)
        assert game.result == "1/2-1/2" and game.termination == "max_plies"
        assert {p.value for p in game.positions} == {0.0}


def test_value_target_is_the_result_from_the_side_to_move_black_mates() -> None:
    # black mates at once (Ra1#): the result is 0-1 and black's position scores +1
    sp = SelfPlay(
        UniformEvaluator(), MCTSConfig(simulations=8), SelfPlaySettings(concurrent_games=1, history=1)
    )
    sp.start(chess.Board("6k1/8/8/8/8/8/r4PPP/6K1 b - - 0 1"))
    [game] = sp.step(start_new=False)
    assert (game.result, game.termination, game.moves) == ("0-1", "checkmate", ["a2a1"])
    assert [p.value for p in game.positions] == [1.0]


def test_value_targets_alternate_with_the_side_to_move() -> None:
    # white is up a queen at max_plies=2: white's position scores +1, black's -1
    sp = SelfPlay(
        UniformEvaluator(),
        MCTSConfig(simulations=2),
        SelfPlaySettings(concurrent_games=1, max_plies=2, adjudicate_material=3, history=1),
    )
    sp.start(chess.Board("k7/8/8/8/8/8/8/KQ6 w - - 0 1"))
    assert sp.step(start_new=False) == []
    [game] = sp.step(start_new=False)
    assert (game.result, game.termination) == ("1-0", "adjudicated_material")
    assert [p.value for p in game.positions] == [1.0, -1.0]


def test_value_target_is_the_result_from_the_side_to_move() -> None:
    # white mates at once: white's position scores +1
    sp = SelfPlay(
        UniformEvaluator(), MCTSConfig(simulations=16), SelfPlaySettings(concurrent_games=1, history=1)
    )
    sp.start(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))
    sp.search.config = MCTSConfig(simulations=64, temperature_moves=0)
    [game] = sp.step(start_new=False)
    assert (game.result, game.termination, game.moves) == ("1-0", "checkmate", ["d1d8"])
    assert [p.value for p in game.positions] == [1.0]


def test_material_adjudication_at_max_plies() -> None:
    assert material_balance(chess.Board("4k3/8/8/8/8/8/8/Q3K3 w - - 0 1")) == 9
    assert material_balance(chess.Board("4k3/q7/8/8/8/8/8/4K3 w - - 0 1")) == -9
    sp = SelfPlay(
        UniformEvaluator(),
        MCTSConfig(simulations=2),
        SelfPlaySettings(concurrent_games=1, max_plies=1, adjudicate_material=3, history=1),
    )
    sp.start(chess.Board("4k3/8/8/8/8/8/8/Q3K3 w - - 0 1"))
    [game] = sp.step(start_new=False)
    assert (game.result, game.termination) == ("1-0", "adjudicated_material")
    assert game.positions[0].value == 1.0


def test_selfplay_is_batched_across_games() -> None:
    ev = UniformEvaluator()
    sp = SelfPlay(ev, MCTSConfig(simulations=4), SelfPlaySettings(concurrent_games=8, max_plies=3, history=1))
    sp.step()
    # one call for the 8 roots, then one per simulation round: 8 leaves each
    assert ev.calls == 5 and ev.positions == 8 + 4 * 8


def test_set_evaluator_stamps_the_new_version() -> None:
    sp = SelfPlay(
        UniformEvaluator(),
        MCTSConfig(simulations=2),
        SelfPlaySettings(concurrent_games=1, max_plies=2, history=1),
    )
    sp.step()
    sp.set_evaluator(UniformEvaluator(), network_version=5)
    [game] = sp.step()
    assert [p.network_version for p in game.positions] == [0, 5]


@pytest.mark.parametrize(
    ("field", "value"),
    [("concurrent_games", 0), ("max_plies", 0), ("history", 0), ("adjudicate_material", -1)],
)
def test_bad_settings(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        SelfPlaySettings(**{field: value})


def test_replay_shards_round_trip(tmp_path) -> None:
    games = _play(2)
    store = Storage.from_uri(str(tmp_path))
    table = positions_table(games)
    assert table.schema.equals(REPLAY_SCHEMA, check_metadata=False)
    rows = write_shard(store, shard_path(3, 0, 7), table)
    assert rows == sum(len(g.positions) for g in games)
    # a write in progress (the atomic writer's temporary name) is not a shard
    (tmp_path / "3" / ".shard-00-000008.parquet.x.tmp").write_bytes(b"half")
    assert list_shards(store) == ["3/shard-00-000007.parquet"]
    batch = read_shards(store, list_shards(store))
    expected = np.stack([p.planes for g in games for p in g.positions])
    np.testing.assert_allclose(batch.planes, expected, atol=1e-3)  # float16 on disk: exact for 0/1 planes
    np.testing.assert_allclose(batch.policy.sum(axis=1), 1.0, atol=1e-5)
    first = games[0].positions[0]
    np.testing.assert_allclose(batch.policy[0, first.policy_indices], first.policy_probs)
    on_disk = pq.read_table(io.BytesIO(store.read_bytes("3/shard-00-000007.parquet")))
    assert set(on_disk["network_version"].to_pylist()) == {0}
    assert on_disk["game_id"].to_pylist()[0] == games[0].game_id


def test_list_shards_orders_by_version(tmp_path) -> None:
    store = Storage.from_uri(str(tmp_path))
    table = positions_table(_play(1))
    for version, n in [(10, 0), (2, 1), (2, 0)]:
        write_shard(store, shard_path(version, 1, n), table)
    assert list_shards(store) == [
        "2/shard-01-000000.parquet",
        "2/shard-01-000001.parquet",
        "10/shard-01-000000.parquet",
    ]
    assert list_shards(store.child("missing")) == []


def test_batched_arena_plays_both_colours_and_mates() -> None:
    mate = Opening(fen="6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")
    games = play_batched_match(
        SearchSide("search", UniformEvaluator(), MCTSConfig(simulations=64)),
        SearchSide("random"),
        [mate],
        max_plies=1,
    )
    assert [(g.white, g.black) for g in games] == [("search", "random"), ("random", "search")]
    assert games[0].moves == ["d1d8"] and games[0].result == "1-0" and games[0].termination == "checkmate"
    assert match_record(games[:1], "search") == (1, 0, 0)


def test_batched_arena_games_are_legal_and_end(tmp_path) -> None:
    net = PolicyValueNet(NetConfig(blocks=0, channels=8, history=1, value_hidden=8))
    games = play_batched_match(
        SearchSide("net", NetworkEvaluator(net), MCTSConfig(simulations=4)),
        SearchSide("random"),
        random_openings(3, 2, seed=5),
        max_plies=30,
        seed=1,
    )
    assert len(games) == 6
    for game in games:
        board = chess.Board()
        for uci in (*game.opening.moves, *game.moves):
            assert chess.Move.from_uci(uci) in board.legal_moves
            board.push_uci(uci)
        assert game.result in {"1-0", "0-1", "1/2-1/2"}
        assert len(game.moves) <= 30
    assert sum(match_record(games, "net")) == 6


def test_batched_arena_needs_two_names() -> None:
    with pytest.raises(ValueError, match="different names"):
        play_batched_match(SearchSide("x"), SearchSide("x"), random_openings(1, 2, seed=1))
