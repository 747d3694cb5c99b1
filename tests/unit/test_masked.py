"""Legal-masked RL and the instrument that measures it: masked log-probs are the full-vocabulary
ones renormalised (sampler, learner and reference alike), the graded reward orders moves as
Stockfish does, engine noise stays a small advantage, masked players never play an illegal move
and still report their unmasked legality, and games at the ply cap are adjudicated."""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import chess
import pytest
import torch

from chessrl.arena.game import play_game
from chessrl.arena.move_quality import (
    PER_GAME,
    heldout_positions,
    move_losses,
    paired_interval,
    paired_over_runs,
)
from chessrl.arena.players import LMPlayer, RandomPlayer
from chessrl.data.positions import random_game_moves
from chessrl.lm.masked import (
    MaskedMoves,
    MaskingError,
    draw_claim_moves,
    legal_nll,
    masked_log_softmax,
    masked_moves,
    pad_ids,
)
from chessrl.lm.models import build_model, prompt_ids
from chessrl.rl.grpo import (
    GRPOSettings,
    Prompt,
    Sample,
    group_advantages,
    masked_completion_logprobs,
    policy_prompt,
    sample_groups,
    score_samples,
)

STOCKFISH = "/usr/games/stockfish"
needs_stockfish = pytest.mark.skipif(not os.access(STOCKFISH, os.X_OK), reason=f"no {STOCKFISH}")


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return build_model("tiny")


def test_masked_log_probs_are_the_full_vocabulary_ones_renormalised() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 50)
    legal = pad_ids([[3, 7, 9], [0, 49], [5]])
    for t in (1.0, 0.7):
        full = torch.softmax(logits / t, -1)
        got = masked_log_softmax(logits, legal, t).exp()
        for row, ids in enumerate([[3, 7, 9], [0, 49], [5]]):
            want = full[row, ids] / full[row, ids].sum()
            assert torch.allclose(got[row, : len(ids)], want, atol=1e-6)
            assert float(got[row, len(ids) :].sum()) == 0.0  # padding has no mass
    mass = torch.softmax(logits, -1)[0, [3, 7, 9]].sum()
    assert float(legal_nll(logits, legal)[0]) == pytest.approx(-float(torch.log(mass)), rel=1e-5)


def test_sampler_learner_and_reference_see_the_same_masked_distribution(tiny) -> None:
    model, tok = tiny
    prompts = [policy_prompt(chess.Board().fen()), Prompt("policy", "e2e4 e7e5", _after("e2e4", "e7e5"))]
    prompts[0] = Prompt("policy", "", chess.Board().fen())  # a game's first move: no space before it
    s = GRPOSettings(group_size=6, masked=True, temperature=0.8)
    torch.manual_seed(3)
    samples = sample_groups(model, tok, prompts, s, {"policy": 1, "environment": 8})
    assert len(samples) == 12
    for x in samples:  # every sampled move is legal, one token, drawn from the position's legal list
        board = chess.Board(x.prompt.fen)
        assert chess.Move.from_uci(x.text.strip()) in board.legal_moves
        assert x.completion_ids[0] in (x.legal_ids or [])
        assert len(x.legal_ids or []) == board.legal_moves.count()
    logprobs, mask, nll = masked_completion_logprobs(model, samples, tok.pad_token_id, 0.8)
    # the learner's log-prob equals the renormalised full-vocabulary probability at that temperature
    for b, x in enumerate(samples):
        with torch.no_grad():
            logits = model(torch.tensor([x.prompt_ids])).logits[0, -1] / 0.8
        full = torch.softmax(logits, -1)
        want = torch.log(full[x.completion_ids[0]] / full[x.legal_ids].sum())
        assert float(logprobs[b, 0].detach()) == pytest.approx(float(want), abs=1e-4)
    assert mask.sum() == len(samples) and bool((nll > 0).all())


def _after(*moves: str) -> str:
    board = chess.Board()
    for m in moves:
        board.push_uci(m)
    return board.fen()


def test_a_masked_update_trains_legality_through_its_own_term(tiny) -> None:
    from chessrl.rl.grpo import grpo_update

    model, tok = build_model("tiny")
    prompts = [Prompt("policy", "e2e4 e7e5 g1f3", _after("e2e4", "e7e5", "g1f3"))]
    s = GRPOSettings(group_size=4, masked=True, beta=0.0, legal_weight=1.0, drop_flat=True)
    samples = sample_groups(model, tok, prompts, s, {"policy": 1, "environment": 8})
    for x in samples:
        x.reward = 1.0  # a flat group: no policy gradient, only the legality term
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = float(masked_completion_logprobs(model, samples, tok.pad_token_id, 1.0)[2][0].detach())
    got = grpo_update(model, None, optimizer, samples, tok.pad_token_id, s)
    after = float(masked_completion_logprobs(model, samples, tok.pad_token_id, 1.0)[2][0].detach())
    assert got["trained_samples"] == 0.0 and got["legal_nll"] == pytest.approx(before, rel=1e-4)
    assert after < before  # -log P(legal) went down


def test_an_online_dpo_round_raises_the_better_ranked_move() -> None:
    """A hanging queen (Rd2xd5): a group of the policy's masked samples, the capture ranked best and
    a king move worst; one online DPO step raises the capture's masked log-prob and lowers the
    king move's, the reference untouched; a group of equal rewards makes no pair."""
    from chessrl.rl.grpo import board_prompt, grpo_update

    torch.manual_seed(5)
    model, tok = build_model("tiny")
    reference = build_model("tiny")[0]
    reference.load_state_dict(model.state_dict())
    fen = "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"
    s = GRPOSettings(group_size=4, masked=True, loss_type="dpo", beta=0.0, dpo_beta=0.1, rpo_alpha=1.0)
    (template,) = sample_groups(
        model,
        tok,
        [board_prompt(fen)],
        GRPOSettings(group_size=2, masked=True),
        {"policy": 1, "environment": 8},
    )[:1]
    legal = MaskedMoves(tok)
    ids = dict(
        zip(sorted(m.uci() for m in chess.Board(fen).legal_moves), template.legal_ids or [], strict=True)
    )

    def sample(move: str, reward: float, group: int = 0) -> Sample:
        return Sample(
            template.prompt,
            group,
            template.prompt_ids,
            [ids[move]],
            " " + move,
            reward,
            "legal",
            legal_ids=template.legal_ids,
        )

    samples = [sample("d2d5", 1.0), sample("e1f1", 0.0), sample("d2d3", 0.4), sample("d2d4", 0.97)]
    samples += [sample("e1e2", 0.5, 1), sample("e1d1", 0.5, 1)]  # flat: no pair
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    before = masked_completion_logprobs(model, samples[:2], tok.pad_token_id, 1.0)[0].detach()[:, 0]
    got = grpo_update(model, reference, optimizer, samples, tok.pad_token_id, s)
    after = masked_completion_logprobs(model, samples[:2], tok.pad_token_id, 1.0)[0].detach()[:, 0]
    assert got["pairs"] == 1.0 and got["trained_samples"] == 2.0
    assert got["dpo_loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference: log 2
    assert float(after[0]) > float(before[0]) and float(after[1]) < float(before[1])
    ref_after = masked_completion_logprobs(reference, samples[:2], tok.pad_token_id, 1.0)[0].detach()[:, 0]
    assert torch.allclose(ref_after, before, atol=1e-6)
    assert legal.move_of(samples[0].completion_ids[0]) == "d2d5"
    with pytest.raises(ValueError, match="dpo_beta must be > 0"):
        GRPOSettings(loss_type="dpo", dpo_beta=0.0)


def test_noise_level_rewards_get_small_advantages_and_a_blunder_a_large_one() -> None:
    s = GRPOSettings(dead_zone=0.03, std_floor=0.1)
    from chessrl.rl.grpo import policy_reward

    best = 0.70
    noisy = [policy_reward("legal", best=best, move=m, settings=s) for m in (0.70, 0.69, 0.675, 0.68)]
    assert noisy == [1.0, 1.0, 1.0, 1.0]  # within the dead zone: all as good as the best move
    rewards = torch.tensor([1.0, 1.0, 0.966, 0.916])  # two moves just past it
    small, _ = group_advantages(rewards, [0] * 4, "grpo", std_floor=s.std_floor)
    assert float(small.abs().max()) < 0.6
    blunder, _ = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), [0] * 4, "grpo", std_floor=s.std_floor)
    assert float(blunder.min()) < -1.4 and float(small.min()) > 0.4 * float(blunder.min())
    unfloored, _ = group_advantages(rewards, [0] * 4, "grpo")
    assert float(unfloored.abs().max()) > 1.0  # without the floor noise looked like a blunder


@needs_stockfish
def test_the_graded_reward_orders_moves_as_stockfish_does() -> None:
    from chessrl.engine.client import SearchLimit
    from chessrl.engine.group import EngineGroup

    cases = {
        # a hanging queen: taking it is best, a king move leaves the material
        "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1": ["d2d5", "e1f1", "d2d1"],
        # a back-rank mate in one, a queen down: anything else loses
        "6k1/5ppp/8/8/8/8/q4PPP/1R4K1 w - - 0 1": ["b1b8", "b1b7", "h2h3"],
        # a quiet opening: two sound moves and a weakening one
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1": ["e2e4", "d2d4", "g2g4"],
    }
    s = GRPOSettings(dead_zone=0.02)
    with EngineGroup(1, path=STOCKFISH) as engines:

        def expected(fens: list[str]) -> list[float]:
            return [a.score.expected for a in engines.analyse(fens, SearchLimit(nodes=20000))]

        def scores(fens: list[str]) -> list[Any]:
            return [a.score for a in engines.analyse(fens, SearchLimit(nodes=20000))]

        samples = [
            Sample(policy_prompt(fen), i, [], [1], f" {m}")
            for i, (fen, moves) in enumerate(cases.items())
            for m in moves
        ]
        score_samples(samples, scores, s)
        losses = move_losses(
            [x.prompt.fen for x in samples], {"m": [x.text.strip() for x in samples]}, expected
        )["m"]
        from chessrl.rl.ppo import scaled_grades  # ppo --reward stockfish: the same grade of each move

        ppo = {
            m: g
            for fen, moves in cases.items()
            for m, g in zip(
                moves,
                scaled_grades(
                    [((), m) for m in moves], scores, "expected", s.max_loss, s.dead_zone, start_fen=fen
                ),
                strict=True,
            )
        }
    r = {x.text.strip(): x.reward for x in samples}
    assert ppo == pytest.approx(r, abs=0.05) and ppo["d2d5"] == 1.0 and ppo["e1f1"] < 0.5  # the hung queen
    assert r["d2d5"] == 1.0 and r["d2d5"] > r["e1f1"] and r["d2d1"] < 0.5
    assert r["b1b8"] == 1.0 and r["b1b7"] < 0.5 and r["h2h3"] < 0.5
    assert r["e2e4"] >= 0.9 and r["d2d4"] >= 0.9 and r["g2g4"] < r["e2e4"]
    # the move-quality instrument ranks them the same way (loss 0 for the best)
    loss = {x.text.strip(): v for x, v in zip(samples, losses, strict=True)}
    assert loss["d2d5"] < loss["e1f1"] and loss["b1b8"] < loss["h2h3"] and loss["e2e4"] < loss["g2g4"]


def test_paired_interval_sees_a_consistent_gain_and_not_noise() -> None:
    rng = random.Random(0)
    start = [rng.random() * 0.3 for _ in range(200)]
    better = [max(0.0, x - 0.03) for x in start]
    q = paired_interval(start, better)
    assert q.low > 0 and q.gain == pytest.approx(sum(start) / 200 - sum(better) / 200)
    shuffled = [rng.random() * 0.3 for _ in range(200)]
    noise = paired_interval(start, shuffled)
    assert noise.low < 0 < noise.high or abs(noise.gain) > 0.01  # unpaired noise: no tight gain


def test_the_paired_interval_counts_a_games_positions_as_one_draw() -> None:
    # eight games, a position each; then the same positions with a copy of one position of game 0
    # and one of game 1 added to their games: clustered by game the copies add no information and
    # the interval widens, where treated as independent positions it would narrow
    start = [0.30, 0.10, 0.25, 0.05, 0.20, 0.15, 0.35, 0.00]
    final = [0.10, 0.12, 0.20, 0.05, 0.10, 0.18, 0.20, 0.02]
    games = list(range(8))
    base = paired_interval(start, final, games=games)
    copied = paired_interval(start + start[:2], final + final[:2], games=games + [0, 1])
    naive = paired_interval(start + start[:2], final + final[:2])
    assert (base.games, copied.games, copied.positions, naive.games) == (8, 8, 10, 10)
    assert copied.high - copied.low > base.high - base.low
    assert naive.high - naive.low < copied.high - copied.low
    # one position a game: exactly the plain paired t interval
    plain = paired_interval(start, final)
    assert (plain.low, plain.high) == (pytest.approx(base.low), pytest.approx(base.high))
    # "same move" counts equal moves; equal losses are counted apart
    q = paired_interval(
        [0.1, 0.0, 0.2], [0.1, 0.0, 0.1], moves=(["e2e4", "d2d4", "g1f3"], ["e2e4", "c2c4", "b1c3"])
    )
    assert (q.same_move, q.equal_loss) == (1, 2)


def test_heldout_positions_are_distinct_a_few_a_game_and_never_the_start() -> None:
    games = [{"moves": " ".join(random_game_moves(random.Random(g), 30))} for g in range(5)]
    picks = heldout_positions(games, 100, seed=3)
    boards = [p.fen.rsplit(" ", 2)[0] for p in picks]
    per_game = Counter(p.game for p in picks)
    assert len(picks) == 5 * PER_GAME and max(per_game.values()) == PER_GAME  # fewer than asked: all there is
    assert len(set(boards)) == len(boards) and chess.Board().fen().rsplit(" ", 2)[0] not in boards
    for p in picks:  # each position is its game's board after its moves
        board = chess.Board()
        for move in p.moves:
            board.push_uci(move)
        assert board.fen() == p.fen
    assert heldout_positions(games, 100, seed=3) == picks and heldout_positions(games, 100, seed=4) != picks


def test_the_gain_over_runs_counts_the_runs_spread_as_well_as_the_positions() -> None:
    rng = random.Random(1)
    start = [rng.random() * 0.3 for _ in range(300)]
    run = [max(0.0, x - 0.02 + rng.gauss(0, 0.05)) for x in start]
    one = paired_interval(start, run)
    # the same run twice: no spread between runs, so exactly its own paired interval
    twice = paired_over_runs(start, [run, run])
    assert (twice.gain, twice.run_sd) == (pytest.approx(one.gain), 0.0)
    assert (twice.low, twice.high) == (pytest.approx(one.low), pytest.approx(one.high))
    # two runs that part (one gains, one loses) each with a tight interval: the mean is near zero
    # and its interval is wider than either run's, with few degrees of freedom
    up, down = [x - 0.03 for x in start], [x + 0.03 for x in start]
    assert paired_interval(start, up).low > 0 > paired_interval(start, down).high
    split = paired_over_runs(start, [up, down])
    assert split.low < 0 < split.high and split.gain == pytest.approx(0.0, abs=1e-12)
    assert split.high - split.low > 10 * (one.high - one.low) and split.df < 2
    with pytest.raises(ValueError, match="two runs at least"):
        paired_over_runs(start, [run])
    with pytest.raises(ValueError, match="every run needs"):
        paired_over_runs(start, [run, run[:-1]])


def test_a_masked_player_plays_only_legal_moves_and_reports_its_unmasked_legality(tiny) -> None:
    model, tok = tiny
    player = LMPlayer(model, tok, name="lm,masked", masked=True, on_illegal="forfeit")
    game = play_game(player, RandomPlayer("random"), opening=("e2e4", "e7e5"), max_plies=30, seed=2)
    assert game.termination != "forfeit" and game.player_moves["white"] == 15
    assert game.illegal_attempts["white"] == 0 and game.fallbacks["white"] == 0
    # first_attempt_legal counts the unmasked argmax: an untrained model's is rarely legal
    boards, rows = [], []
    board = chess.Board()
    for i, uci in enumerate(game.opening.moves + tuple(game.moves)):
        if i >= 2 and board.turn == chess.WHITE:
            boards.append(board.copy())
            rows.append(prompt_ids(tok, " ".join(m.uci() for m in board.move_stack)))
        board.push_uci(uci)
    choices = masked_moves(
        model, tok, boards, rows, [True] * len(boards), exclude=[draw_claim_moves(b) for b in boards]
    )
    assert game.first_attempt_legal["white"] == sum(c.unmasked_legal for c in choices)
    assert [c.moves[0] for c in choices] == game.moves[0::2]


def test_games_at_the_ply_cap_are_adjudicated_by_the_evaluator() -> None:
    for cp, result in ((+500, "1-0"), (-500, "0-1"), (+40, "1/2-1/2")):
        game = play_game(
            RandomPlayer("a"),
            RandomPlayer("b"),
            max_plies=6,
            seed=1,
            evaluator=lambda fen, cp=cp: cp,
            adjudicate_cp=300,
        )  # white to move after 6 plies: the evaluator's cp is white's
        assert (game.result, game.termination) == (result, "adjudicated")
    plain = play_game(RandomPlayer("a"), RandomPlayer("b"), max_plies=6, seed=1, evaluator=lambda fen: 900)
    assert (plain.result, plain.termination) == ("1/2-1/2", "max_plies")


def test_a_tokenizer_that_splits_moves_cannot_be_masked() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2TokenizerFast

    core = Tokenizer(models.BPE(vocab={"e": 0, "2": 1, "4": 2, "<|endoftext|>": 3}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe = GPT2TokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    with pytest.raises(MaskingError, match="one token per move"):
        MaskedMoves(bpe)


def test_masked_ppo_plays_only_legal_moves_with_the_learners_log_probs(tiny) -> None:
    from chessrl.lm.legality import MoveTokens
    from chessrl.rl.ppo import PPOSettings, make_batch, play_episodes, random_opponent
    from chessrl.rl.ppo_learner import action_terms
    from chessrl.rl.reward import build_reward_model

    model, tok = tiny
    critic, _ = build_reward_model("tiny", tok)
    table = MoveTokens(tok)
    s = PPOSettings(masked=True, gamma=0.0, temperature=1.0)
    gen = torch.Generator().manual_seed(0)
    actions = play_episodes(
        model,
        tok,
        table,
        [("a", []), ("b", ["e2e4"])],
        [random_opponent(1)],
        s,
        6,
        0,
        gen,
        lambda queries: [0.1] * len(queries),
    )
    assert len(actions) == 12 and all(a.legal for a in actions)  # an untrained model, masked: never illegal
    batch = make_batch(actions, model, critic, tok.pad_token_id, s, moves_table=table)
    assert batch.masked and batch.legal_ids is not None
    # the behaviour log-prob, the reference's (same weights) and the learner's are one number
    assert torch.allclose(batch.kl, torch.zeros_like(batch.kl), atol=1e-5)
    with torch.no_grad():
        learner, _, raw = action_terms(
            model, batch.rows, batch.actions, tok.pad_token_id, 1.0, batch.legal_ids
        )
    assert torch.allclose(learner, batch.old_logprobs.float(), atol=1e-5)
    # the masked terms keep finite gradients (the -inf padding of the legal lists must not leak)
    logprob, entropy, _ = action_terms(
        model, batch.rows, batch.actions, tok.pad_token_id, 1.0, batch.legal_ids
    )
    (logprob.mean() - 0.0 * entropy.mean()).backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    model.zero_grad()
    full = torch.softmax(raw, -1)
    for i in range(len(batch.rows)):
        ids = [int(x) for x in batch.legal_ids[i] if x >= 0]
        want = torch.log(full[i, int(batch.actions[i])] / full[i, ids].sum())
        assert float(learner[i]) == pytest.approx(float(want), abs=1e-4)


def test_masked_players_do_not_hand_over_a_draw_claim_when_they_have_another_move(tiny) -> None:
    """Two deterministic masked players would replay the same moves until a threefold claim: a
    masked player leaves out every move that gives its opponent a claim, unless none is left."""
    model, tok = tiny
    board = chess.Board()
    for m in ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1"]:
        board.push_uci(m)
    assert draw_claim_moves(board) == {"f6g8"}
    row = [prompt_ids(tok, " ".join(m.uci() for m in board.move_stack))]
    legal = sorted(m.uci() for m in board.legal_moves)
    for keep in legal[:5]:  # whatever the model prefers, only the one move left can be chosen
        [c] = masked_moves(model, tok, [board], row, [True], exclude=[set(legal) - {keep}])
        assert c.moves == [keep]
    [c] = masked_moves(model, tok, [board], row, [True], exclude=[set(legal)])  # nothing left: all allowed
    assert c.moves[0] in legal
