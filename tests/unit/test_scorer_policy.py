"""The scorer policy, Ray-free: its probabilities are the softmax of what plain ``transformers``
scores for each legal move's text, and a loss's gradient through the shared-prefix forward pass
is the gradient through every row read whole."""

from __future__ import annotations

import chess
import pytest
import torch

from chessrl.lm.shared_prefix import group_logits
from chessrl.rl.reward import TEXT_FORMAT_KEY, build_reward_model
from chessrl.rl.scorer_policy import ScorerPolicy, move_rows

# a pinned knight, a capture, checks: texts that differ after their shared board rows
FEN = "r1bqk1nr/pppp1ppp/2n5/1Bb1p3/4P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 4 4"


@pytest.fixture(scope="module")
def facts_judge():
    torch.manual_seed(3)
    model, tok = build_reward_model("tiny")
    setattr(model.config, TEXT_FORMAT_KEY, "facts")
    return model, tok


def test_the_policy_is_the_softmax_of_what_transformers_scores(facts_judge) -> None:
    model, tok = facts_judge
    board = chess.Board(FEN)
    policy = ScorerPolicy(model, tok, temperature=0.5)
    moves, logp = policy.log_probs(board)
    assert moves == sorted(m.uci() for m in board.legal_moves)
    with torch.no_grad():
        alone = torch.tensor(
            [
                float(model(input_ids=torch.tensor([row])).logits[0, 0])
                for row in move_rows(tok, model.config, board, moves)
            ]
        )
    assert logp.detach() == pytest.approx(torch.log_softmax(alone / 0.5, -1), abs=1e-4)
    assert policy.best(board) == moves[int(alone.argmax())]
    generator = torch.Generator().manual_seed(0)
    assert {policy.sample(board, generator) for _ in range(20)} <= set(moves)


def test_a_gradient_through_the_shared_prefix_is_the_gradient_through_whole_rows(facts_judge) -> None:
    model, tok = facts_judge
    board = chess.Board(FEN)
    moves = sorted(m.uci() for m in board.legal_moves)
    rows = move_rows(tok, model.config, board, moves)
    weights = torch.linspace(-1, 1, len(rows))
    grads = []
    for min_prefix in (16, 10**9):  # shared, then whole
        model.zero_grad()
        (
            torch.log_softmax(group_logits(model, rows, tok.pad_token_id, min_prefix), -1) * weights
        ).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    shared, whole = grads
    assert shared.keys() == whole.keys() and "transformer.wte.weight" in shared
    for name in whole:
        assert torch.allclose(shared[name], whole[name], atol=1e-5, rtol=1e-3), name


def _scorer_samples(facts_judge, group_size: int = 4):
    from chessrl.rl.grpo import board_prompt, sample_groups
    from chessrl.rl.grpo_types import GRPOSettings

    model, tok = facts_judge
    settings = GRPOSettings(group_size=group_size, beta=0.0, temperature=0.7)
    prompts = [board_prompt(chess.Board().fen()), board_prompt(FEN, history=())]
    torch.manual_seed(5)
    return sample_groups(model, tok, prompts, settings, {"policy": 1}), settings


def test_grpo_samples_a_scorer_s_legal_moves_and_steps_along_its_policy_gradient(facts_judge) -> None:
    """A scorer as GRPO's policy: every sampled move is legal, the learner's log-probabilities
    are the ScorerPolicy's, and grpo_update's gradient is that of -mean(advantage * log pi)
    taken through the policy move by move."""
    from chessrl.rl.grpo import evaluate_tasks, group_advantages, grpo_update
    from chessrl.rl.grpo_scorer import scorer_completion_logprobs
    from chessrl.rl.scorer_policy import board_at

    model, tok = facts_judge
    samples, settings = _scorer_samples(facts_judge)
    assert len(samples) == 8 and all(s.move_rows is not None for s in samples)
    assert all(chess.Move.from_uci(s.text) in board_at(s.prompt.fen).legal_moves for s in samples)
    policy = ScorerPolicy(model, tok, temperature=settings.temperature)
    got, _ = scorer_completion_logprobs(model, samples, tok.pad_token_id, settings.temperature)
    want = []
    for s in samples:
        moves, logp = policy.log_probs(board_at(s.prompt.fen))
        want.append(logp[moves.index(s.text)])
    torch.testing.assert_close(got[:, 0], torch.stack(want).detach(), atol=1e-5, rtol=1e-5)

    for i, s in enumerate(samples):
        s.reward = float(i % 3 == 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # no step: the gradient is left to read
    grpo_update(model, None, optimizer, samples, tok.pad_token_id, settings, max_grad_norm=1e9)
    update = [p.grad.clone() for p in model.parameters()]
    advantages, _ = group_advantages(
        torch.tensor([s.reward for s in samples]), [s.group for s in samples], "grpo"
    )
    model.zero_grad()
    again = []
    for s in samples:
        moves, logp = policy.log_probs(board_at(s.prompt.fen))
        again.append(logp[moves.index(s.text)])
    (-(advantages * torch.stack(again)).mean()).backward()
    for a, b in zip(update, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    assert evaluate_tasks(model, tok, [s.prompt for s in samples[::4]], {"policy": 1})["legal_rate"] == 1.0


def test_a_scorer_plays_its_own_games_and_their_prompts_keep_the_moves(facts_judge) -> None:
    """OwnGames with a scorer as the policy, against a random mover and its frozen start: its
    moves are legal, and each prompt keeps the game's moves (the grade sees a repetition)."""
    from chessrl.rl.own_games import OwnGames
    from chessrl.rl.scorer_policy import board_at

    model, tok = facts_judge
    games = OwnGames(
        [("e2e4",), ("d2d4", "d7d5")], live=2, text_format="facts", opponent="random+start", seed=1
    )
    torch.manual_seed(0)
    for _ in range(3):
        prompts = games.prompts(model, tok, temperature=1.0, start=model)
    assert all(p.phase == "own" and len(p.history.split()) >= 7 for p in prompts)
    assert all(board_at(p.fen, p.history).move_stack for p in prompts)  # the moves lead to the position
