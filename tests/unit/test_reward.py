"""The reward model's evaluation arithmetic and texts, Ray-free: ranks with ties, Spearman's
correlation (against scipy and by hand), pairwise accuracy, the held-out board rule, and the ids
a pair is trained on equal the ids a query is scored on."""

from __future__ import annotations

import random

import chess
import pytest
from scipy.stats import spearmanr

from chessrl.lm.tokenizer import build_chess_tokenizer
from chessrl.rl.reward import (
    InvalidQueryError,
    RewardQuery,
    heldout_board,
    mean_spearman,
    pairwise_accuracy,
    query_ids,
    ranks,
    spearman,
    text_ids,
)


def test_ranks_share_ties():
    # sorted: 1 (rank 1), 2 2 (ranks 2 and 3 -> 2.5 each), 5 (rank 4)
    assert ranks([5, 2, 1, 2]) == [4.0, 2.5, 1.0, 2.5]
    assert ranks([]) == []


def test_spearman_by_hand():
    # x ranks 1 2 3 4, y ranks 1 3 2 4: d = 0 -1 1 0, sum d^2 = 2, rho = 1 - 6*2/(4*15) = 0.8
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2], [2, 1]) == pytest.approx(-1.0)


@pytest.mark.parametrize("seed", range(5))
def test_spearman_equals_scipy_with_ties(seed):
    rng = random.Random(seed)
    xs = [rng.randint(0, 6) for _ in range(30)]
    ys = [x + rng.randint(-3, 3) for x in xs]
    assert spearman(xs, ys) == pytest.approx(spearmanr(xs, ys).statistic, abs=1e-12)


def test_spearman_without_a_ranking_is_none_and_lengths_must_match():
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1], [1]) is None
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman([1, 2, 3], [1, 2])


def test_mean_spearman_skips_groups_without_a_ranking():
    value, counted = mean_spearman([([1, 2, 3], [3, 2, 1]), ([1, 2, 3], [1, 2, 3]), ([4, 4], [1, 2])])
    assert (value, counted) == (0.0, 2)
    assert mean_spearman([]) == (None, 0)


def test_pairwise_accuracy_counts_ties_half():
    assert pairwise_accuracy([1.0, 2.0, 3.0, 0.0], [0.0, 2.0, 4.0, -1.0]) == pytest.approx(2.5 / 4)
    assert pairwise_accuracy([], []) is None


def test_heldout_board_is_stable_about_one_in_twenty_and_ignores_move_counters():
    import chess

    board = chess.Board()
    fens = []
    rng = random.Random(1)
    for _ in range(2000):
        if board.is_game_over():
            board = chess.Board()
        board.push(rng.choice(list(board.legal_moves)))
        fens.append(board.fen())
    distinct = {" ".join(f.split()[:4]) for f in fens}
    share = sum(heldout_board(f) for f in distinct) / len(distinct)
    assert 0.02 < share < 0.09
    fen = fens[10]
    parts = fen.split()
    assert heldout_board(fen) == heldout_board(" ".join([*parts[:4], "7", "40"]))


def test_a_pair_is_trained_on_the_ids_a_query_is_scored_on():
    tok = build_chess_tokenizer()
    query = RewardQuery(("e2e4", "e7e5"), "g1f3")
    # the preference table's prompt + chosen, as the preferences phase writes them
    assert text_ids(tok, "e2e4 e7e5" + " g1f3") == query_ids(tok, query)
    ids = query_ids(tok, query)
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id and len(ids) == 5
    # the first move of a game has no leading space
    assert text_ids(tok, "" + "d2d4") == query_ids(tok, RewardQuery((), "d2d4"))


def test_evaluate_reward_model_is_accuracy_and_spearman_of_its_scores():
    import torch

    from chessrl.rl.reward import build_reward_model, evaluate_reward_model, score_ids

    torch.manual_seed(0)
    model, tok = build_reward_model("tiny")
    model.train()
    rows = [query_ids(tok, q) for q in (RewardQuery((), m) for m in ("e2e4", "d2d4", "g1f3", "a2a3"))]
    pairs = [
        {"chosen_ids": rows[0], "rejected_ids": rows[1], "kind": "worse"},
        {"chosen_ids": rows[2], "rejected_ids": rows[3], "kind": "illegal"},
    ]
    scores = score_ids(model.eval(), rows, tok.pad_token_id)
    model.train()
    metrics = evaluate_reward_model(model, pairs, [{"ids": rows, "cp": [30, 20, 10, 0]}], tok.pad_token_id)
    assert model.training  # left as it was
    assert metrics["heldout_accuracy"] == pairwise_accuracy([scores[0], scores[2]], [scores[1], scores[3]])
    assert metrics["heldout_accuracy_legal"] == pairwise_accuracy([scores[0]], [scores[1]])
    # by kind: Stockfish's move against a worse one, against an illegal one
    assert metrics["heldout_accuracy_worse"] == pairwise_accuracy([scores[0]], [scores[1]])
    assert metrics["heldout_accuracy_illegal"] == pairwise_accuracy([scores[2]], [scores[3]])
    assert metrics["heldout_spearman"] == spearman(scores, [30, 20, 10, 0])
    assert metrics["heldout_spearman_positions"] == 1.0
    # score_ids in chunks equals one pass
    assert score_ids(model.eval(), rows, tok.pad_token_id, batch_size=3) == pytest.approx(scores, abs=1e-5)


def test_a_board_reading_pair_is_trained_on_the_ids_its_query_is_scored_on():
    """A reward model that reads the board: a preference row (prompt moves, or a FEN alone) gives
    the ids the RewardServer asks it (:func:`query_ids` in the board format), and a row whose
    position cannot be rebuilt is left out of the training stage, not mis-read."""
    import chess

    from chessrl.lm.formats import BoardFormat
    from chessrl.rl.reward import reward_format
    from pipelines.reward import pair_ids, tokenize_pairs

    tok = build_chess_tokenizer()
    board = BoardFormat()
    row = {"prompt": "e2e4 e7e5", "chosen": " g1f3", "rejected": " f1a6", "fen": None}
    chosen, rejected = pair_ids(tok, "board", row)
    assert chosen == query_ids(tok, RewardQuery(("e2e4", "e7e5"), "g1f3"), board)
    assert rejected == query_ids(tok, RewardQuery(("e2e4", "e7e5"), "f1a6"), board)
    assert chosen != query_ids(tok, RewardQuery(("e2e4", "e7e5"), "g1f3"))  # not the moves text
    # the same position from a FEN alone (no moves that reach it): the same ids
    after = chess.Board()
    for uci in ("e2e4", "e7e5"):
        after.push_uci(uci)
    assert pair_ids(tok, "board", {**row, "prompt": "", "fen": after.fen()})[0] == chosen
    # moves: the table's own text, as before
    assert pair_ids(tok, "moves", row)[0] == text_ids(tok, "e2e4 e7e5 g1f3")
    batch = {
        "prompt": ["e2e4 e7e5", "e2e4 e2e4"],
        "chosen": [" g1f3", " g1f3"],
        "rejected": [" f1a6", " a2a3"],
        "fen": [None, None],
        "kind": ["worse", "random"],
    }
    out = tokenize_pairs(batch, tok, max_length=512, holdout=False, text_format="board")
    assert out["fits"].tolist() == [True, False]  # the second position cannot be rebuilt
    assert list(out["chosen_ids"][0]) == chosen
    assert reward_format({"chessrl_text_format": "board"}).name == "board"
    assert reward_format({}).name == "moves"


def test_the_position_cache_checks_queries_as_replaying_them_does():
    """Step-by-step queries of several random games (a collector's shape): the cache's boards
    equal a full replay, its errors are the same, it replays only new moves, and it stays bounded."""
    import random

    from chessrl.rl.reward import PositionCache

    rng = random.Random(3)
    games = []
    for _ in range(4):
        board, moves = chess.Board(), []
        while len(moves) < 40 and not board.is_game_over():
            moves.append(rng.choice(list(board.legal_moves)).uci())
            board.push_uci(moves[-1])
        games.append(moves)
    cache = PositionCache(size=16, lookback=4)
    for ply in range(0, 40, 2):  # every other ply, as a collector sees its games
        for moves in games:
            if ply < len(moves):
                q = RewardQuery(tuple(moves[:ply]), moves[ply])
                assert cache.validate(q).fen() == q.validate().fen()
    assert cache.hits >= 70 and len(cache.boards) == 16
    bad = [
        RewardQuery(tuple(games[0][:10]), "a1a1"),
        RewardQuery(tuple(games[0][:10]) + ("e1e8",), games[0][11]),  # an illegal move in the game
        RewardQuery((), "e2e4", fen="not a fen"),
    ]
    for q in bad:
        with pytest.raises(InvalidQueryError) as replayed:
            q.validate()
        with pytest.raises(InvalidQueryError) as cached:
            cache.validate(q)
        assert str(cached.value) == str(replayed.value)


def test_the_judges_bar_counts_balanced_positions_and_clearly_worse_moves_only() -> None:
    from chessrl.rl.reward import judge_measures

    perfect = [([float(c) for c in cps], cps) for cps in ([30, -200, 10, -900], [250, 100, -50])]
    lopsided = ([5.0, 0.0, 9.0], [1200, 1100, -300])  # not balanced; its best is ranked below a blunder
    got = judge_measures([*perfect, lopsided])
    assert got["best_over_random_balanced"] == 1.0 and got["balanced_positions"] == 2.0
    # pairs 0.1 expected score apart: two in each perfect position (10 is within 0.1 of 30), and in
    # the lopsided one only -300 (1100 is within 0.1 of 1200), which the judge ranks above the best
    assert got["worse_pairs"] == 5.0 and got["best_over_worse"] == pytest.approx(4 / 5)
    inverted = judge_measures([([-float(c) for c in cps], cps) for _, cps in perfect])
    assert inverted["best_over_random_balanced"] == 0.0 and inverted["best_over_worse"] == 0.0
    ties = judge_measures([([1.0, 1.0, 1.0], [0, -150, -400])])
    assert ties["best_over_random_balanced"] == 0.5  # a judge that cannot tell counts as a coin


@pytest.mark.parametrize("text_format", ["board-after", "facts"])
def test_the_judges_loss_on_a_hanging_queen_teaches_it_the_capture(text_format: str) -> None:
    """A hanging queen (exd5 wins it): annotate's pairs choose the capture over each clearly worse
    move, the judge reads each in its format (the board after it; the board, the move's facts
    and what it leaves hanging: different texts), and TRL's pairwise loss
    (``-logsigmoid(chosen - rejected)``, RewardTrainer's) on those ids falls over a few steps of a
    tiny reward model until the capture scores above every rejected move."""
    import torch

    from chessrl.lm.formats import get_format
    from chessrl.lm.models import right_padded
    from chessrl.rl.preferences import annotation_pairs
    from chessrl.rl.reward import build_reward_model, pair_texts, score_ids, text_ids

    fen = "4k3/8/8/3q4/4P3/8/8/R3K3 w Q - 0 1"
    moves = ["e4d5"] + sorted(m.uci() for m in chess.Board(fen).legal_moves if m.uci() != "e4d5")
    row = {
        "fen": fen,
        "moves": moves,
        "cp": [900] + [-850] * (len(moves) - 1),
        "phase": "endgame",
        "game_id": "g",
        "ply": 30,
    }
    pairs = annotation_pairs(row, 2, 50, random.Random(0))
    assert pairs and all(p["chosen"] == " e4d5" for p in pairs)
    torch.manual_seed(0)
    model, tok = build_reward_model()
    fmt = get_format(text_format)
    texts = [pair_texts(fmt, p["prompt"], p["fen"], p["chosen"], p["rejected"]) for p in pairs]
    assert all(t is not None and t[0] != t[1] for t in texts)
    chosen = [text_ids(tok, t[0]) for t in texts]  # type: ignore[index]
    rejected = [text_ids(tok, t[1]) for t in texts]  # type: ignore[index]

    def loss() -> torch.Tensor:
        ids, mask = right_padded(chosen + rejected, tok.pad_token_id)
        scores = model(input_ids=ids, attention_mask=mask).logits[:, 0]
        return -torch.nn.functional.logsigmoid(scores[: len(chosen)] - scores[len(chosen) :]).mean()

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = loss().item()
    for _ in range(20):
        opt.zero_grad()
        (step := loss()).backward()
        opt.step()
    model.eval()
    assert step.item() < first * 0.5, (first, step.item())
    capture, others = (
        score_ids(model, chosen[:1], tok.pad_token_id)[0],
        score_ids(model, rejected, tok.pad_token_id),
    )
    assert all(capture > s for s in others)


def test_a_judge_reading_shared_beginnings_once_scores_as_transformers_does_row_by_row() -> None:
    """One position's legal moves in the facts format (the board shared, ~8x faster read once),
    two positions of one game in the moves format, and a row that shares nothing, mixed: each
    score equals the model run on that row alone, in its order."""
    import torch

    from chessrl.lm.formats import get_format
    from chessrl.lm.shared_prefix import prefix_groups
    from chessrl.rl.reward import build_reward_model, score_ids

    torch.manual_seed(1)
    model, tok = build_reward_model("tiny")
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/2B1P3/5Q2/PPPP1PPP/RNB1K1NR w KQkq - 2 3")
    facts = [
        query_ids(tok, RewardQuery((), m.uci(), board.fen()), get_format("facts"), board)
        for m in board.legal_moves
    ]
    game = ("e2e4", "e7e5", "g1f3", "b8c6", "f1b5", "a7a6", "b5a4", "g8f6")
    moves = [query_ids(tok, RewardQuery(game[:n], game[n])) for n in (6, 7)]
    rows = [moves[0], *facts[:9], [tok.bos_token_id, tok.eos_token_id], *facts[9:], moves[1]]
    groups = prefix_groups(rows)
    assert sorted(i for _, members in groups for i in members) == list(range(len(rows)))
    assert any(shared > 100 and len(members) == len(facts) for shared, members in groups)
    alone = []
    with torch.no_grad():
        for row in rows:
            alone.append(float(model(input_ids=torch.tensor([row])).logits[0, 0]))
    assert score_ids(model, rows, tok.pad_token_id, batch_size=8) == pytest.approx(alone, abs=1e-4)
