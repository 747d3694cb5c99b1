"""GRPO's pure parts on hand-made cases: the policy-task reward (best move, a blunder, illegal,
unparseable, mate scores), the environment-task reward field by field, the group advantages of
each loss type, the loss on hand-worked numbers, and the position generator's mix on real games."""

from __future__ import annotations

import math

import chess
import pytest
import torch

from chessrl.data.pgn import read_pgn_file
from chessrl.data.positions import PositionSampler, check_mix, phase_counts, phase_of, split_counts
from chessrl.engine.client import Score
from chessrl.rl.grpo import (
    ENV_FIELDS,
    ENV_WEIGHTS,
    GRPOSettings,
    env_prompt,
    env_reward,
    group_advantages,
    grpo_loss,
    parse_policy_completion,
    policy_prompt,
    policy_reward,
)


@pytest.fixture(scope="module")
def games(pgn_dir) -> list[dict[str, str]]:
    with open(pgn_dir / "lichess-2021-10-sample.pgn", "rb") as handle:
        records, _ = read_pgn_file(handle, "lichess")
    return [{"moves": r.moves} for r in records[:120]]


# -- policy task --------------------------------------------------------------------------------


def test_policy_reward_best_blunder_and_floor():
    even = Score(cp=20, mate=None).expected
    assert policy_reward("legal", best=even, move=even) == 1.0
    blunder = Score(cp=-900, mate=None).expected  # a queen given away from an even position
    assert policy_reward("legal", best=even, move=blunder) == 0.0
    small = Score(cp=-10, mate=None).expected  # 30 cp worse than best
    assert 0.8 < policy_reward("legal", best=even, move=small) < 1.0
    s = GRPOSettings(illegal_reward=-2.0)
    assert policy_reward("illegal", best=even, move=None, settings=s) == -2.0
    assert policy_reward("unparseable", best=even, move=None, settings=s) == -2.0


def test_policy_reward_with_mate_scores():
    mate_in_1 = Score(cp=None, mate=1).expected
    mate_in_3 = Score(cp=None, mate=3).expected
    drawn = Score(cp=0, mate=None).expected
    mated = Score(cp=None, mate=-2).expected
    assert mate_in_1 > 0.99 and mated < 0.01
    assert policy_reward("legal", best=mate_in_1, move=mate_in_3) > 0.99  # still mates
    assert policy_reward("legal", best=mate_in_1, move=drawn) == 0.0  # lets a mate go
    # a reward never exceeds 1, even when the move scores above the engine's best at its limit
    assert policy_reward("legal", best=drawn, move=mate_in_3) == 1.0
    assert policy_reward("legal", best=mate_in_1, move=mated) == 0.0


def test_parse_policy_completion():
    fen = chess.STARTING_FEN
    assert parse_policy_completion(fen, " e2e4") == ("legal", "e2e4")
    assert parse_policy_completion(fen, " e2e5")[0] == "illegal"
    assert parse_policy_completion(fen, " Nf3")[0] == "unparseable"
    assert parse_policy_completion(fen, "")[0] == "unparseable"


def test_policy_prompt_is_rookworld_text():
    p = policy_prompt(chess.STARTING_FEN)
    assert p.text == f"P: {chess.STARTING_FEN} M:" and p.task == "policy"


# -- environment task ---------------------------------------------------------------------------


def test_env_targets_from_python_chess():
    mate = env_prompt("7k/5Q2/6K1/8/8/8/8/8 w - - 0 1", "f7g7")
    assert mate.target.endswith("+1+1+0") and mate.text == "A: 7k/5Q2/6K1/8/8/8/8/8 w - - 0 1+f7g7++"
    stalemate = env_prompt("7k/8/5QK1/8/8/8/8/8 w - - 0 1", "f6f7")
    assert stalemate.target.endswith("+0.5+1+0")
    quiet = env_prompt(chess.STARTING_FEN, "g1f3", ["e2e4", "e7e5"])
    board = chess.Board()
    board.push_uci("g1f3")
    assert quiet.target == f"{board.fen()}+0+0+0" and "+e2e4 e7e5+" in quiet.text


@pytest.mark.parametrize("wrong", ENV_FIELDS)
def test_env_reward_each_field_wrong(wrong):
    target = env_prompt(chess.STARTING_FEN, "e2e4").target
    parts = target.split("+")
    i = ENV_FIELDS.index(wrong)
    parts[i] = "junk" if wrong == "fen" else ("1" if parts[i] == "0" else "0")
    got = env_reward("+".join(parts), target)
    assert got.fields == {f: f != wrong for f in ENV_FIELDS}
    assert math.isclose(got.reward, 1.0 - ENV_WEIGHTS[wrong])
    assert not got.exact


def test_env_reward_right_missing_and_extra():
    target = env_prompt(chess.STARTING_FEN, "d2d4").target
    assert env_reward(target, target).exact and env_reward(" " + target, target).reward == 1.0
    cut = env_reward(target.rsplit("+", 2)[0], target)  # terminated and truncated missing
    assert cut.fields == {"fen": True, "reward": True, "terminated": False, "truncated": False}
    extra = env_reward(target + "+e7e5", target)
    assert extra.reward == 1.0 and not extra.exact
    assert env_reward("", target).reward == 0.0


# -- advantages and loss ------------------------------------------------------------------------


def test_group_advantages_by_loss_type():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    # group 0: mean 0.25, unbiased std sqrt(0.25) = 0.5
    adv, keep = group_advantages(rewards, groups, "grpo")
    assert torch.allclose(adv[:4], torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5)
    assert torch.equal(adv[4:], torch.zeros(4)) and bool(keep.all())
    adv, _ = group_advantages(rewards, groups, "dr_grpo")
    assert torch.allclose(adv[:4], torch.tensor([0.75, -0.25, -0.25, -0.25]))
    _, keep = group_advantages(rewards, groups, "dapo")
    assert keep.tolist() == [True] * 4 + [False] * 4


def _loss(loss_type: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, **kw):
    s = GRPOSettings(loss_type=loss_type, beta=0.0, **kw)
    return grpo_loss(new, old, None, adv, mask, s, norm_length=2)


def test_grpo_loss_aggregations_by_hand():
    # two sequences, of 1 and 2 tokens; ratio 1 everywhere, so each token's loss is -A
    lp = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    assert _loss("grpo", lp, lp, adv, mask)[0].item() == pytest.approx(0.0)  # mean(-1, +1)
    assert _loss("dapo", lp, lp, adv, mask)[0].item() == pytest.approx(1 / 3)  # (-1 + 1 + 1) / 3
    assert _loss("dr_grpo", lp, lp, adv, mask)[0].item() == pytest.approx(0.25)  # mean(-1/2, 2/2)


def test_grpo_loss_clips_and_clip_higher():
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), 0.5)  # ratio e^0.5 = 1.65
    mask = torch.ones(1, 1)
    adv = torch.tensor([1.0])
    loss, m = _loss("grpo", new, old, adv, mask)
    assert loss.item() == pytest.approx(-1.2) and m["clipfrac"] == 1.0
    assert _loss("dapo", new, old, adv, mask)[0].item() == pytest.approx(-1.28)
    # a negative advantage is not clipped from above: -A * ratio
    assert _loss("grpo", new, old, -adv, mask)[0].item() == pytest.approx(math.exp(0.5))


def test_grpo_loss_kl_term():
    lp = torch.tensor([[-1.0]])
    ref = torch.tensor([[-2.0]])  # k3 = e^-1 - (-1) - 1 = 0.3679
    s = GRPOSettings(beta=0.5)
    loss, m = grpo_loss(lp, lp, ref, torch.tensor([0.0]), torch.ones(1, 1), s)
    assert m["kl"] == pytest.approx(math.exp(-1)) and loss.item() == pytest.approx(0.5 * math.exp(-1))


def test_grpo_overfit_moves_probability_toward_rewarded_completion():
    """One group of four completions (tokens 5, 6, 6, 7) of a one-token vocabulary-8 policy;
    only token 5 is rewarded. On-policy steps (old = current) keep raising its probability;
    with the old log-probs held fixed, the clip stops it near (1 + clip) x its start."""
    tokens = torch.tensor([5, 6, 6, 7])
    adv, _ = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), [0, 0, 0, 0], "grpo")
    s = GRPOSettings(beta=0.0)

    def train(steps: int, refresh: bool) -> float:
        logits = torch.nn.Parameter(torch.zeros(8))
        opt = torch.optim.SGD([logits], lr=0.5)
        old = torch.log_softmax(logits, -1)[tokens].detach().unsqueeze(-1)
        for _ in range(steps):
            lp = torch.log_softmax(logits, -1)[tokens].unsqueeze(-1)
            if refresh:
                old = lp.detach()
            loss, _ = grpo_loss(lp, old, None, adv, torch.ones(4, 1), s)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return torch.softmax(logits, -1)[5].item()

    assert train(8, refresh=True) > 0.3  # from 1/8
    assert 0.125 < train(8, refresh=False) < 0.125 * 1.2 * 1.1


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        GRPOSettings(group_size=1)
    with pytest.raises(ValueError, match="loss types: grpo, dr_grpo, dapo"):
        GRPOSettings(loss_type="ppo")  # type: ignore[arg-type]


# -- positions ----------------------------------------------------------------------------------


def test_phase_of():
    assert phase_of(chess.Board(), 0) == "opening"
    assert phase_of(chess.Board(), 40) == "middlegame"
    assert phase_of(chess.Board("4k3/8/8/8/8/8/PPPP4/4K3 w - - 0 1"), 5) == "endgame"


def test_split_counts_and_mix():
    assert split_counts(100, [0.2, 0.6, 0.2]) == [20, 60, 20]
    assert sum(split_counts(7, [0.2, 0.6, 0.2])) == 7
    assert check_mix({"opening": 2, "middlegame": 6, "endgame": 2})["middlegame"] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="phases: opening, middlegame, endgame"):
        check_mix({"opening": 1, "blitz": 1})
    with pytest.raises(ValueError, match="positive sum"):
        check_mix({"opening": 0})


def test_sampler_mix_on_real_games(games):
    sampler = PositionSampler(games, seed=3)
    assert all(n > 100 for n in sampler.available().values())
    picks = sampler.sample(200)
    assert phase_counts(picks) == {"opening": 40, "middlegame": 120, "endgame": 40}
    for p in picks[:30]:
        board = p.board()
        replay = chess.Board()
        for m in p.history:
            replay.push_uci(m)
        assert replay.fen() == p.fen and phase_of(board, len(p.history)) == p.phase
        assert p.next_move is None or chess.Move.from_uci(p.next_move) in board.legal_moves
    again = PositionSampler(games, seed=3).sample(200)
    assert [p.fen for p in again] == [p.fen for p in picks]
    assert phase_counts(sampler.sample(50, {"endgame": 1.0})) == {
        "opening": 0,
        "middlegame": 0,
        "endgame": 50,
    }


def test_sampler_without_games_or_phase():
    start = PositionSampler([], seed=0).sample(3)
    assert {p.fen for p in start} == {chess.STARTING_FEN}
    short = PositionSampler([{"moves": "e2e4 e7e5"}], seed=0)
    assert phase_counts(short.sample(10)) == {"opening": 10, "middlegame": 0, "endgame": 0}


# -- sampling, scoring and updating groups on a tiny model ---------------------------------------


@pytest.fixture(scope="module")
def tiny_policy():
    from chessrl.lm.models import build_model

    torch.manual_seed(0)
    model, tok = build_model("tiny")
    return model.eval(), tok


def test_groups_sampled_scored_and_updated(tiny_policy):
    from chessrl.engine.client import Score
    from chessrl.rl.grpo import batch_metrics, completion_logprobs, grpo_update, sample_groups, score_samples

    model, tok = tiny_policy
    prompts = [policy_prompt(chess.STARTING_FEN), env_prompt(chess.STARTING_FEN, "e2e4")]
    s = GRPOSettings(group_size=3, beta=0.0)
    samples = sample_groups(model, tok, prompts, s, {"policy": 2, "environment": 12})
    assert [x.group for x in samples] == [0, 0, 0, 1, 1, 1]
    assert all(len(x.completion_ids) <= (2 if x.prompt.task == "policy" else 12) for x in samples)
    asked: list[list[str]] = []

    def scores(fens: list[str]) -> list[Score]:  # the engine's answer, by hand: every position even
        asked.append(fens)
        return [Score(cp=0, mate=None, wdl=(0, 1000, 0))] * len(fens)

    score_samples(samples, scores, s)
    for x in samples[:3]:
        assert x.status in ("legal", "illegal", "unparseable")
        assert x.reward == (1.0 if x.status == "legal" else -1.0)
    assert len(asked) <= 1 and all(x.status in ("exact", "partial") for x in samples[3:])
    metrics = batch_metrics(samples)
    assert metrics["policy_share"] == 0.5 and 0.0 <= metrics["zero_variance_groups"] <= 1.0
    # the log-probs through the LM head at the completion positions equal a full forward pass's
    logprobs, mask = completion_logprobs(model, samples, tok.pad_token_id, temperature=1.0)
    for b, x in enumerate(samples):
        ids = torch.tensor([x.prompt_ids + x.completion_ids])
        full = torch.log_softmax(model(ids).logits[0].float(), -1)
        n = len(x.completion_ids)
        want = [full[len(x.prompt_ids) - 1 + k, t].item() for k, t in enumerate(x.completion_ids)]
        assert torch.allclose(logprobs[b, :n], torch.tensor(want), atol=1e-4) and mask[b].sum() == n
    # one step: with different rewards in a group the weights move, with none they do not
    for x, r in zip(samples, [1.0, 0.0, 0.0, 0.3, 0.3, 0.3], strict=True):
        x.reward = r
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    got = grpo_update(model, None, opt, samples, tok.pad_token_id, s, minibatch=2)
    assert got["trained_samples"] == 6 and got["grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("opponent", ["random", "start", "random+start"])
def test_own_games_against_an_opponent_ask_the_policy_side_only(tiny_policy, opponent):
    """Games against another player: every prompt has the policy to move (the colour it took
    at its start), the opponent's replies are legal, and games go on between calls."""
    import chess

    from chessrl.rl.own_games import OwnGames

    model, tok = tiny_policy
    games = OwnGames(
        [("e2e4",), ("d2d4", "d7d5")], live=4, text_format="board", opponent=opponent, max_plies=12
    )
    seen = set()
    for _ in range(5):
        for i, prompt in enumerate(games.prompts(model, tok, temperature=1.0, start=model)):
            board = chess.Board(prompt.fen)
            assert board.turn == games.sides[i] and not board.is_game_over()
            assert prompt.text.split()[1] == ("w" if games.sides[i] else "b")
            seen.add(len(games.games[i]))
    assert max(seen) > 4  # the games went on, two plies a call
    assert {games.sides[i] for i in range(4)} == {chess.WHITE, chess.BLACK}
    if opponent == "random+start":
        assert set(games.against) == {"random", "start"}
    if opponent != "random":
        with pytest.raises(ValueError, match="start model"):
            OwnGames([("e2e4",)], live=1, text_format="board", opponent="start").prompts(model, tok)


def test_evaluate_tasks_greedy(tiny_policy):
    from chessrl.rl.grpo import evaluate_tasks

    model, tok = tiny_policy
    prompts = [policy_prompt(chess.STARTING_FEN), env_prompt(chess.STARTING_FEN, "e2e4")] * 2
    got = evaluate_tasks(model, tok, prompts, {"policy": 2, "environment": 8})
    assert got["policy_positions"] == 2 and got["env_positions"] == 2
    assert 0.0 <= got["legal_rate"] <= 1.0 and got["env_exact"] == 0.0  # 8 tokens cannot hold a FEN


# -- the moves format ---------------------------------------------------------------------------


def test_moves_prompts_ask_the_game_so_far_and_need_policy_share_one(games):
    import random

    from chessrl.rl.grpo import task_prompts

    positions = PositionSampler(games, seed=3).sample(40)
    prompts = task_prompts(positions, 1.0, random.Random(0), "moves")
    assert len(prompts) == 40 and {p.task for p in prompts} == {"policy"}
    by_text = {" ".join(p.history): p for p in positions}
    for prompt in prompts:
        assert prompt.fen == by_text[prompt.text].fen  # the moves replayed give the position's FEN
    with pytest.raises(ValueError, match="policy_share must be 1"):
        task_prompts(positions, 0.8, random.Random(0), "moves")


def test_one_token_completions_read_each_prompt_once_with_the_same_logprobs(tiny_policy, games):
    """A group of one-move completions shares its prompt: the log-probs from one read per prompt
    equal a full forward pass of every prompt + completion, and gradients flow."""
    import random

    from chessrl.rl.grpo import completion_logprobs, sample_groups, task_prompts

    model, tok = tiny_policy
    prompts = task_prompts(PositionSampler(games, seed=4).sample(3), 1.0, random.Random(0), "moves")
    s = GRPOSettings(group_size=4, beta=0.0)
    samples = sample_groups(model, tok, prompts, s, {"policy": 1, "environment": 8})
    assert len(samples) == 12 and all(len(x.completion_ids) == 1 for x in samples)
    logprobs, mask = completion_logprobs(model, samples, tok.pad_token_id, temperature=0.7)
    for b, x in enumerate(samples):
        full = torch.log_softmax(model(torch.tensor([x.prompt_ids])).logits[0, -1].float() / 0.7, -1)
        assert abs(logprobs[b, 0].item() - full[x.completion_ids[0]].item()) < 1e-4 and mask[b, 0] == 1
    logprobs.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad(set_to_none=True)
