"""PPO's episode, experience and update on tiny models, Ray-free: rewards by hand, the episode
loop's rules (the policy's colour, an illegal move ends it, at most T actions, prompts are the
game so far), GAE over each episode, and a one-batch overfit that moves the policy toward the
rewarded action."""

from __future__ import annotations

from dataclasses import replace

import chess
import pytest
import torch

from chessrl.lm.formats import BoardFormat, MovesFormat
from chessrl.lm.legality import MoveTokens
from chessrl.lm.models import build_model, prompt_ids
from chessrl.rl.ppo import (
    Action,
    PPOSettings,
    make_batch,
    play_episodes,
    ppo_iteration,
    ppo_update,
    random_opponent,
    result_for,
)
from chessrl.rl.ppo_learner import (
    action_logprobs,
    action_rewards,
    action_terms,
    last_token_logits,
    legal_move_ids,
    state_values,
)
from chessrl.rl.reward import build_reward_model


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    policy, tok = build_model("tiny")
    critic, _ = build_reward_model("tiny", tok)
    return policy.eval(), critic, tok


def test_action_rewards_by_hand():
    s = PPOSettings(kl_coef=0.5, illegal_penalty=-3.0, result_weight=2.0)
    # step 1: 1.0 - 0.5 * (-1.0 - -1.5) = 0.75 ; step 2 illegal: -3.0 - 0.5 * 0.2 = -3.1, plus 2 * -1
    assert action_rewards([1.0, 0.0], [True, False], [-1.0, -2.0], [-1.5, -2.2], s, result=-1.0) == [
        pytest.approx(0.75),
        pytest.approx(-5.1),
    ]
    assert action_rewards([], [], [], [], s, result=1.0) == []


def test_result_for_the_policy_side():
    mate = chess.Board()
    for uci in ["f2f3", "e7e5", "g2g4", "d8h4"]:  # fool's mate: black wins
        mate.push_uci(uci)
    assert result_for(mate, chess.BLACK) == 1.0 and result_for(mate, chess.WHITE) == -1.0
    assert result_for(chess.Board(), chess.WHITE) == 0.0


def test_episodes_follow_the_rules(tiny):
    policy, _, tok = tiny
    moves_table = MoveTokens(tok)
    starts = [("a", []), ("b", ["e2e4"]), ("c", ["d2d4", "d7d5"])]
    scored: list[tuple[list[str], str]] = []

    def score(queries):
        scored.extend(queries)
        return [0.5] * len(queries)

    gen = torch.Generator().manual_seed(0)
    actions = play_episodes(
        policy, tok, moves_table, starts, [random_opponent(1)], PPOSettings(), 4, 7, gen, score
    )
    fmt = MovesFormat()
    by_episode: dict[str, list[Action]] = {}
    for a in actions:
        by_episode.setdefault(a.episode, []).append(a)
    assert set(by_episode) == {"a", "b", "c"}
    for name, steps in by_episode.items():
        assert 1 <= len(steps) <= 4
        assert [a.t for a in steps] == list(range(len(steps)))
        assert steps[-1].last and not any(a.last for a in steps[:-1])
        # only the last action may be illegal (an illegal move ends the episode)
        assert all(a.legal for a in steps[:-1])
        assert all(a.version == 7 for a in steps)
        start = dict(starts)[name]
        board = chess.Board()
        for uci in start:
            board.push_uci(uci)
        colour = board.turn
        history = list(start)
        for a in steps:
            assert a.prompt_ids == prompt_ids(tok, fmt.prompt(history))
            assert board.turn == colour  # the policy always moves for the side it started with
            if a.legal:
                assert a.score == 0.5 and (history, a.move) in scored
                board.push_uci(a.move)
                history.append(a.move)
                if not a.last:
                    # the opponent's reply is in the next prompt
                    nxt = steps[a.t + 1]
                    board_moves = tok.decode(nxt.prompt_ids, skip_special_tokens=True).split()
                    board.push_uci(board_moves[-1])
                    history.append(board_moves[-1])
            else:
                assert a.score == 0.0
    # an untrained policy proposes illegal moves: some episode ended on one
    assert any(not a.legal for a in actions)


def test_board_prompts_and_k_moves_a_position_scored_against_each_other(tiny):
    """samples_per_state 3 in the board format: each turn's prompt is the position, three legal
    moves are drawn and graded, and the learner scores each against the other two's mean (a
    move grading above its siblings gets a positive reward, below a negative one)."""
    policy, critic, tok = tiny
    grades = {"e2e4": 1.0, "d2d4": 0.6}  # every other move 0

    def score(queries):
        return [grades.get(move, 0.0) for _, move in queries]

    settings = PPOSettings(masked=True, gamma=0.0, kl_coef=0.0, text_format="board", samples_per_state=3)
    gen = torch.Generator().manual_seed(0)
    starts = [("a", []), ("b", ["g1f3", "g8f6"])]
    actions = play_episodes(  # "b" a table position: one move (ppo.table_positions), "a" a game of T 2
        policy, tok, MoveTokens(tok), starts, [random_opponent(1)], settings, [2, 1], 0, gen, score
    )
    assert [a.t for a in actions if a.episode == "a"] == [0, 1] and [
        a.t for a in actions if a.episode == "b"
    ] == [0]
    with pytest.raises(ValueError, match="3 limits for 2 starts"):
        play_episodes(
            policy, tok, MoveTokens(tok), starts, [random_opponent(1)], settings, [2, 1, 1], 0, gen, score
        )
    board = chess.Board()
    first = next(a for a in actions if a.episode == "a" and a.t == 0)
    assert first.prompt_ids == prompt_ids(tok, BoardFormat().policy_prompt(board))
    legal = {tok.convert_tokens_to_ids(f"Ġ{m.uci()}") for m in board.legal_moves} | {
        tok.convert_tokens_to_ids(f" {m.uci()}") for m in board.legal_moves
    }
    assert set(first.legal_ids) <= legal and len(first.legal_ids) == 20
    for a in actions:
        assert a.legal and len(a.alt_ids) == 2 and len(a.alt_scores) == 2
        assert set(a.alt_ids) <= set(a.legal_ids)
    a = Action(
        "p",
        0,
        first.prompt_ids,
        first.legal_ids[0],
        "a2a3",
        True,
        -3.0,
        0,
        score=1.0,
        legal_ids=first.legal_ids,
        alt_ids=first.legal_ids[1:3],
        alt_logprobs=[-3.0, -3.0],
        alt_scores=[0.0, 0.5],
    )
    batch = make_batch([a], policy, critic, tok.pad_token_id, settings, moves_table=MoveTokens(tok))
    assert batch.rewards.tolist() == pytest.approx([0.75, -0.75, 0.0])  # 1 - 0.25, 0 - 0.75, 0.5 - 0.5
    assert batch.score_mean == pytest.approx(0.5)
    with pytest.raises(ValueError, match="gamma must be 0"):  # the moves not played have no continuation
        make_batch(
            [a], policy, critic, tok.pad_token_id, replace(settings, gamma=0.5), moves_table=MoveTokens(tok)
        )


def test_a_shared_prompt_is_read_once_with_the_same_logits_and_values(tiny):
    policy, critic, tok = tiny
    rows = [prompt_ids(tok, "e2e4"), prompt_ids(tok, "d2d4 d7d5"), prompt_ids(tok, "e2e4")]
    once = last_token_logits(policy, rows, tok.pad_token_id)
    each = torch.cat([last_token_logits(policy, [r], tok.pad_token_id) for r in rows])
    assert torch.allclose(once, each, atol=1e-5) and torch.equal(once[0], once[2])
    values = state_values(critic, rows, tok.pad_token_id)
    assert torch.allclose(
        values, torch.cat([state_values(critic, [r], tok.pad_token_id) for r in rows]), atol=1e-5
    )


def test_make_batch_gae_per_episode(tiny):
    policy, critic, tok = tiny
    s = PPOSettings(kl_coef=0.0, gamma=1.0, lam=1.0, illegal_penalty=-3.0, center_scores=False)
    rows = [prompt_ids(tok, "e2e4"), prompt_ids(tok, "e2e4 e7e5 g1f3"), prompt_ids(tok, "d2d4")]
    token = tok.convert_tokens_to_ids("e7e5")
    acts = [
        Action("x", 0, rows[0], token, "e7e5", True, -1.0, 0, score=1.0),
        Action("x", 1, rows[1], token, "b8c6", True, -1.0, 0, score=2.0, last=True, result=1.0),
        Action("y", 0, rows[2], token, "zz", False, -1.0, 0, last=True),
    ]
    batch = make_batch(acts, policy, critic, tok.pad_token_id, s)
    # gamma = lam = 1, no KL: the return of a step is the sum of the rewards from it on
    assert batch.rewards.tolist() == pytest.approx([1.0, 2.0, -3.0])
    assert batch.returns.tolist() == pytest.approx([3.0, 2.0, -3.0], abs=1e-5)
    assert batch.advantages.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert batch.legal.tolist() == [True, True, False]
    # centred scores: the legal moves' mean (1.5) is taken off, the penalty stays
    centred = make_batch(acts, policy, critic, tok.pad_token_id, PPOSettings(kl_coef=0.0, gamma=1.0, lam=1.0))
    assert centred.rewards.tolist() == pytest.approx([-0.5, 0.5, -3.0])
    assert centred.returns.tolist() == pytest.approx([0.0, 0.5, -3.0], abs=1e-5)


def test_centred_scores_make_playing_on_beat_an_early_illegal_move(tiny):
    """A policy whose legal moves the reward model rates below its average (-0.4 each) must not
    prefer an illegal move that ends the episode to playing on: with raw scores and gamma = 1, the
    legal move's return (-0.4 x 3 - 3) is below the illegal move's (-3); centred, no lower."""
    policy, critic, tok = tiny
    token = tok.convert_tokens_to_ids("e7e5")
    row = prompt_ids(tok, "e2e4")
    acts = [
        Action("a", t, row, token, "e7e5", t < 3, -1.0, 0, score=-0.4 if t < 3 else 0.0, last=t == 3)
        for t in range(4)
    ]
    acts += [Action("b", 0, row, token, "zz", False, -1.0, 0, last=True)]
    for centre, legal_wins in ((False, False), (True, True)):
        s = PPOSettings(kl_coef=0.0, gamma=1.0, lam=1.0, center_scores=centre)
        batch = make_batch(acts, policy, critic, tok.pad_token_id, s)
        assert bool(batch.returns[0] >= batch.returns[4] - 1e-6) is legal_wins


def test_one_batch_overfit_moves_the_policy_toward_the_rewarded_move():
    torch.manual_seed(1)
    policy, tok = build_model("tiny")
    critic, _ = build_reward_model("tiny", tok)
    moves_table = MoveTokens(tok)
    row = prompt_ids(tok, "e2e4 e7e5")
    good, bad = tok.convert_tokens_to_ids("g1f3"), tok.convert_tokens_to_ids("e1e2")
    pad = tok.pad_token_id
    assert good in moves_table.move_of and bad in moves_table.move_of

    def prob(token: int) -> float:
        with torch.no_grad():
            lp, _ = action_logprobs(policy, [row], torch.tensor([token]), pad)
        return lp.exp().item()

    before = prob(good) / prob(bad)
    settings = PPOSettings(kl_coef=0.0, ppo_epochs=2, minibatch=8)
    popt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    copt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        with torch.no_grad():
            lps = action_logprobs(policy, [row, row], torch.tensor([good, bad]), pad)[0].tolist()
        acts = [
            Action(f"e{i}", 0, row, tok_id, move, True, lp, 0, score=score, last=True)
            for i in range(8)
            for tok_id, move, lp, score in ((good, "g1f3", lps[0], 1.0), (bad, "e1e2", lps[1], -1.0))
        ]
        for j, a in enumerate(acts):
            a.episode = f"e{j}"
        batch = make_batch(acts, policy, critic, pad, settings)
        metrics = ppo_update(policy, critic, popt, copt, batch, pad, settings, gen)
    after = prob(good) / prob(bad)
    assert after > 5 * before
    assert 0.0 <= metrics["clipfrac"] <= 1.0 and metrics["legal_rate"] == 1.0


def test_critic_warm_up_leaves_the_policy_alone(tiny):
    _, critic, tok = tiny
    policy, _ = build_model("tiny", tok)
    row = prompt_ids(tok, "e2e4")
    token = tok.convert_tokens_to_ids("e7e5")
    acts = [
        Action(f"e{i}", 0, row, token, "e7e5", True, -8.0, 0, score=float(i), last=True) for i in range(4)
    ]
    settings = PPOSettings(ppo_epochs=1, minibatch=4)
    before = [p.detach().clone() for p in policy.parameters()]
    batch = make_batch(acts, policy, critic, tok.pad_token_id, settings)
    copt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    metrics = ppo_update(policy, critic, None, copt, batch, tok.pad_token_id, settings, torch.Generator())
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert "pg_loss" not in metrics and metrics["value_loss"] >= 0


def test_legal_move_loss_moves_probability_onto_the_legal_moves(tiny):
    """With the legal-move loss (and a zero advantage, so PPO itself does nothing), updates raise
    the probability mass on the legal moves of the actions' positions."""
    from chessrl.rl.ppo_learner import Batch

    policy, critic, tok = tiny
    table = MoveTokens(tok)
    rows = [prompt_ids(tok, "e2e4"), prompt_ids(tok, "d2d4 d7d5"), prompt_ids(tok, "")]
    actions = [tok.convert_tokens_to_ids(m) for m in ("e7e5", "c2c4", "e2e4")]
    legal = legal_move_ids(rows, actions, table)
    assert (legal >= 0).sum(1).tolist() == [20, 27, 20]  # black after 1.e4; white after 1.d4 d5; the start
    n = len(rows)
    with torch.no_grad():
        old, _ = action_logprobs(policy, rows, torch.tensor(actions), tok.pad_token_id)
    batch = Batch(
        rows,
        torch.tensor(actions),
        old,
        torch.zeros(n),
        torch.zeros(n),
        torch.zeros(n),
        torch.zeros(n),
        torch.zeros(n),
        torch.ones(n, dtype=torch.bool),
        legal,
    )
    s = PPOSettings(ppo_epochs=20, minibatch=n, legal_coef=1.0)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    copt = torch.optim.AdamW(critic.parameters(), lr=1e-3)
    first = ppo_update(
        policy, critic, opt, copt, batch, tok.pad_token_id, s, torch.Generator().manual_seed(0)
    )
    again = ppo_update(
        policy, critic, opt, copt, batch, tok.pad_token_id, s, torch.Generator().manual_seed(0)
    )
    assert again["legal_mass"] > first["legal_mass"] + 0.1


def test_the_anchor_raises_the_best_graded_of_the_moves_drawn(tiny):
    """anchor_coef: the best-graded of a position's k drawn moves is marked, and with every
    advantage zero (so PPO's own term moves nothing) the anchor alone raises its masked
    log-probability; without it the policy stays where it was."""
    _, critic, tok = tiny
    table = MoveTokens(tok)
    row = prompt_ids(tok, "e2e4")
    drawn = [tok.convert_tokens_to_ids(m) for m in ("e7e5", "c7c5", "a7a6")]
    a = Action(
        "p",
        0,
        row,
        drawn[0],
        "e7e5",
        True,
        -3.0,
        0,
        score=0.5,
        alt_ids=drawn[1:],
        alt_logprobs=[-3.0, -3.0],
        alt_scores=[1.0, 0.0],
    )
    settings = PPOSettings(
        masked=True, gamma=0.0, kl_coef=0.0, samples_per_state=3, ppo_epochs=4, minibatch=3
    )
    batch = make_batch([a], tiny[0], critic, tok.pad_token_id, settings, moves_table=table)
    assert batch.best is not None and batch.best.tolist() == [False, True, False]  # c7c5, graded 1.0
    batch = replace(batch, advantages=torch.zeros(3))

    def best_logprob(policy) -> float:
        with torch.no_grad():
            return action_terms(
                policy, [row], torch.tensor([drawn[1]]), tok.pad_token_id, 1.0, batch.legal_ids[1:2]
            )[0].item()

    for coef in (0.0, 1.0):
        torch.manual_seed(2)
        policy, _ = build_model("tiny", tok)
        before = best_logprob(policy)
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.0)
        copt = torch.optim.AdamW(critic.parameters(), lr=1e-3)
        metrics = ppo_update(
            policy,
            critic,
            opt,
            copt,
            batch,
            tok.pad_token_id,
            replace(settings, anchor_coef=coef),
            torch.Generator().manual_seed(0),
        )
        if coef:
            assert best_logprob(policy) > before + 0.1 and metrics["anchor_nll"] > 0
        else:
            assert best_logprob(policy) == pytest.approx(before, abs=1e-6) and "anchor_nll" not in metrics


def test_the_ratio_is_one_at_the_first_step_under_the_learners_autocast(tiny, monkeypatch):
    """The collectors' old log-probs are fp32; a GPU learner updates under bf16 autocast (CPU
    autocast stands in for it here): the policy's new log-probs are still fp32, so the ratio of
    the first minibatch of the first epoch is 1, not bf16's rounding, and the critic's values
    are make_batch's old values (issue 71)."""
    import chessrl.rl.ppo_learner as learner

    policy, critic, tok = tiny
    policy, _ = build_model("tiny", tok)  # its own copy: this test steps it
    policy.eval()
    gen = torch.Generator().manual_seed(3)
    starts = [(f"g{i}", ["e2e4", "e7e5"][: i % 3]) for i in range(6)]
    acts = play_episodes(
        policy,
        tok,
        MoveTokens(tok),
        starts,
        [random_opponent(2)],
        PPOSettings(),
        3,
        0,
        gen,
        lambda q: [0.5] * len(q),
    )
    settings = PPOSettings(ppo_epochs=1, minibatch=len(acts), center_scores=False)
    batch = make_batch(acts, policy, critic, tok.pad_token_id, settings)
    ratios: list[torch.Tensor] = []
    real = learner.ppo_policy_loss

    def spy(logprob, entropy, raw, old, *args, **kwargs):
        ratios.append((logprob - old).detach().exp())
        return real(logprob, entropy, raw, old, *args, **kwargs)

    monkeypatch.setattr(learner, "ppo_policy_loss", spy)
    value_gaps: list[float] = []
    real_value_loss = learner.compute_value_loss

    def value_spy(values, returns, old_values, *args, **kwargs):
        value_gaps.append((values - old_values).abs().max().item())
        return real_value_loss(values, returns, old_values, *args, **kwargs)

    monkeypatch.setattr(learner, "compute_value_loss", value_spy)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    copt = torch.optim.AdamW(critic.parameters(), lr=0.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ppo_update(
            policy, critic, opt, copt, batch, tok.pad_token_id, settings, torch.Generator().manual_seed(0)
        )
    assert ratios and ratios[0].numel() == len(acts)
    assert (ratios[0] - 1).abs().max().item() < 1e-6
    assert (
        value_gaps and value_gaps[0] < 1e-6
    )  # the critic's values too: the value clip sees no bf16 rounding


def test_ppo_iteration_plays_scores_and_moves_the_policy_in_one_process():
    """PPO on one screen (``ppo_iteration``, the reading copy of what collectors and learner do):
    episodes played against a random mover, every policy move scored, one update that changes
    the policy and not its frozen reference."""
    import copy

    torch.manual_seed(0)
    policy, tok = build_model("tiny")
    critic, _ = build_reward_model("tiny", tok)
    reference = copy.deepcopy(policy).eval()
    scored: list[tuple[list[str], str]] = []

    def score(queries):
        scored.extend(queries)
        return [1.0 if move.startswith("e") else 0.0 for _, move in queries]

    before = [p.detach().clone() for p in policy.parameters()]
    settings = PPOSettings(ppo_epochs=1, minibatch=8, masked=True)  # legal moves only: each one scored
    metrics = ppo_iteration(
        policy,
        reference,
        critic,
        torch.optim.AdamW(policy.parameters(), lr=1e-3),
        torch.optim.AdamW(critic.parameters(), lr=1e-3),
        tok,
        MoveTokens(tok),
        [("a", []), ("b", ["e2e4"])],
        [random_opponent(1)],
        settings,
        3,
        0,
        torch.Generator().manual_seed(0),
        score,
    )
    assert scored and metrics["actions"] >= 2 and metrics["value_loss"] >= 0
    assert {"pg_loss", "kl_to_ref", "play_s", "learn_s"} <= set(metrics)
    assert not all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(before, reference.parameters(), strict=True))
