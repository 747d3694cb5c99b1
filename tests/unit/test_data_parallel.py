"""Data-parallel learning without DDP (:mod:`chessrl.rl.data_parallel`) on a real gloo process
group of two processes: gradients averaged (a worker with nothing to learn sends zeros and still
steps with the other), the work counted over both, one stop decision, metrics weighted by
samples, a GRPO update whose second worker's groups are all flat, and PPO minibatches that line
up when the workers hold different numbers of episodes."""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, port: int, out: dict) -> None:
    from chessrl.lm.models import build_model, prompt_ids
    from chessrl.rl.data_parallel import any_worker, average_gradients, metrics_over_workers
    from chessrl.rl.grpo import GRPOSettings, Prompt, Sample, grpo_update

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        layer = torch.nn.Linear(3, 1)
        if rank == 0:  # only the first worker has something to learn
            layer(torch.ones(1, 3)).sum().backward()
        total = average_gradients(layer, 5.0 if rank == 0 else 0.0)
        out[f"grad{rank}"] = layer.weight.grad.clone()
        out[f"total{rank}"] = total
        out[f"stop{rank}"] = any_worker(rank == 1)
        out[f"metrics{rank}"] = metrics_over_workers(
            {"reward": 1.0 if rank == 0 else 0.0, "samples": 3.0 if rank == 0 else 1.0},
            3 if rank == 0 else 1,
            sums=["samples"],
        )
        # GRPO: worker 1's only group is flat (every reward equal: nothing to learn), worker 0's is not
        model, tok = build_model("tiny", seed=3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prompt = Prompt("policy", "e2e4", "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1")
        ids = prompt_ids(tok, prompt.text)
        rewards = [1.0, 0.0] if rank == 0 else [0.5, 0.5]
        samples = [
            Sample(prompt, 0, ids, tok(m, add_special_tokens=False)["input_ids"], m, reward=r)
            for m, r in zip([" e7e5", " a7a6"], rewards, strict=True)
        ]
        settings = GRPOSettings(group_size=2, loss_type="dapo", beta=0.0)
        got = grpo_update(model, None, opt, samples, tok.pad_token_id, settings, reduce=average_gradients)
        out[f"trained{rank}"] = got["trained_samples"]
        out[f"weights{rank}"] = model.lm_head.weight.detach().clone()
        # PPO: 3 episodes here, 1 there, minibatches of 2: the busiest worker's 2 minibatches on
        # both (the second one empty on worker 1), policy and critic stepped together
        from chessrl.rl.data_parallel import max_over_workers
        from chessrl.rl.ppo import Action, PPOSettings, make_batch, ppo_update
        from chessrl.rl.reward import build_reward_model

        torch.manual_seed(5)
        policy, tok = build_model("tiny", seed=5)
        critic, _ = build_reward_model("tiny", tok)
        row = prompt_ids(tok, "e2e4 e7e5")
        move = tok.convert_tokens_to_ids("g1f3")
        acts = [
            Action(f"w{rank}e{i}", 0, row, move, "g1f3", True, -8.0, 0, score=float(i + rank), last=True)
            for i in range(3 if rank == 0 else 1)
        ]
        settings = PPOSettings(kl_coef=0.0, ppo_epochs=1, minibatch=2)
        batch = make_batch(acts, policy, critic, tok.pad_token_id, settings)
        popt, copt = (
            torch.optim.SGD(policy.parameters(), lr=0.1),
            torch.optim.SGD(critic.parameters(), lr=0.1),
        )
        parts = int(max_over_workers((len(acts) + 1) // 2))
        ppo_update(
            policy,
            critic,
            popt,
            copt,
            batch,
            tok.pad_token_id,
            settings,
            torch.Generator().manual_seed(rank),
            minibatches=parts,
            reduce=average_gradients,
        )
        out[f"ppo{rank}"] = (
            parts,
            policy.lm_head.weight.detach().clone(),
            critic.score.weight.detach().clone(),
        )
    finally:
        dist.destroy_process_group()


def test_two_workers_average_and_step_together() -> None:
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_worker, args=(_free_port(), out), nprocs=2, join=True)
    alone = torch.ones(1, 3)  # d(sum(Wx + b))/dW on worker 0 (work 5); zeros on worker 1 (work 0)
    # weighted by work: worker 1's nothing does not halve worker 0's gradient
    assert torch.allclose(out["grad0"], alone) and torch.allclose(out["grad1"], alone)
    assert out["total0"] == out["total1"] == 5.0
    assert out["stop0"] is True and out["stop1"] is True  # worker 1's limit stops both
    assert out["metrics0"] == out["metrics1"] == {"reward": 0.75, "samples": 4.0}
    # worker 1 dropped its flat group (dapo) yet stepped with worker 0: the weights stay equal, and moved
    assert out["trained0"] == 2.0 and out["trained1"] == 0.0
    assert torch.equal(out["weights0"], out["weights1"])
    from chessrl.lm.models import build_model

    start, _ = build_model("tiny", seed=3)
    assert not torch.equal(out["weights0"], start.lm_head.weight.detach())
    (parts0, policy0, critic0), (parts1, policy1, critic1) = out["ppo0"], out["ppo1"]
    assert parts0 == parts1 == 2
    assert torch.equal(policy0, policy1) and torch.equal(critic0, critic1)
    untouched, _ = build_model("tiny", seed=5)
    assert not torch.equal(policy0, untouched.lm_head.weight.detach())


def _grpo_step(samples_of, ranks, reduce=None):
    """One GRPO step (SGD) of a fresh tiny model on the samples of ``ranks``; its lm_head."""
    from chessrl.lm.models import build_model
    from chessrl.rl.grpo import GRPOSettings, grpo_update

    model, tok = build_model("tiny", seed=11)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    samples = [s for r in ranks for s in samples_of(tok, r)]
    settings = GRPOSettings(group_size=2, loss_type="grpo", beta=0.0)
    grpo_update(model, None, opt, samples, tok.pad_token_id, settings, reduce=reduce)
    return model.lm_head.weight.detach().clone()


def _grpo_samples(tok, rank):
    """Worker ``rank``'s group: two answers to its own position, rewards apart."""
    from chessrl.lm.models import prompt_ids
    from chessrl.rl.grpo import Prompt, Sample

    text = ["e2e4", "d2d4"][rank]
    prompt = Prompt("policy", text, "8/8/8/8/8/8/8/8 w - - 0 1")
    ids = prompt_ids(tok, text)
    return [
        Sample(prompt, rank, ids, tok(m, add_special_tokens=False)["input_ids"], m, reward=r)
        for m, r in ((" e7e5", 1.0), (" a7a6", 0.2 * rank))
    ]


def _ppo_step(ranks, sums=None, minibatches=None, reduce=None):
    """One PPO step (SGD, one minibatch) of a fresh tiny policy and critic on the episodes of
    ``ranks`` (each two one-move episodes, scores apart); their last layers."""
    from chessrl.lm.models import build_model, prompt_ids
    from chessrl.rl.ppo import Action, PPOSettings, make_batch, ppo_update
    from chessrl.rl.reward import build_reward_model

    torch.manual_seed(13)
    policy, tok = build_model("tiny", seed=13)
    critic, _ = build_reward_model("tiny", tok)
    acts = []
    for rank in ranks:
        row = prompt_ids(tok, ["e2e4 e7e5", "d2d4 d7d5"][rank])
        for i, (move, score) in enumerate((("g1f3", 1.0 + rank), ("b1c3", -0.5 * rank))):
            acts.append(
                Action(
                    f"r{rank}e{i}",
                    0,
                    row,
                    tok.convert_tokens_to_ids(move),
                    move,
                    True,
                    -8.0,
                    0,
                    score=score,
                    last=True,
                    result=0.0,
                )
            )
    settings = PPOSettings(kl_coef=0.0, ppo_epochs=1, minibatch=8)
    batch = make_batch(acts, policy, critic, tok.pad_token_id, settings, sums=sums)
    popt, copt = torch.optim.SGD(policy.parameters(), lr=0.5), torch.optim.SGD(critic.parameters(), lr=0.5)
    ppo_update(
        policy,
        critic,
        popt,
        copt,
        batch,
        tok.pad_token_id,
        settings,
        torch.Generator().manual_seed(0),
        minibatches=minibatches,
        reduce=reduce,
    )
    return policy.lm_head.weight.detach().clone(), critic.score.weight.detach().clone()


def _same_as_one_worker(rank: int, port: int, out: dict) -> None:
    from chessrl.rl.data_parallel import average_gradients, sum_over_workers

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        out[f"grpo{rank}"] = _grpo_step(_grpo_samples, [rank], reduce=average_gradients)
        out[f"ppo{rank}"] = _ppo_step([rank], sums=sum_over_workers, minibatches=1, reduce=average_gradients)
    finally:
        dist.destroy_process_group()


def test_two_workers_on_halves_learn_what_one_learns_on_the_whole() -> None:
    """The same global batch, split over two workers or not: the same weights after a step (grpo:
    a group a worker; ppo: two episodes a worker, the score centre and the advantages' whitening
    over both, as one worker computes them)."""
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_same_as_one_worker, args=(_free_port(), out), nprocs=2, join=True)
    grpo_alone = _grpo_step(_grpo_samples, [0, 1])
    assert torch.allclose(out["grpo0"], grpo_alone, atol=1e-6) and torch.equal(out["grpo0"], out["grpo1"])
    policy_alone, critic_alone = _ppo_step([0, 1])
    for rank in (0, 1):
        policy, critic = out[f"ppo{rank}"]
        assert torch.allclose(policy, policy_alone, atol=1e-6) and torch.allclose(
            critic, critic_alone, atol=1e-6
        )
    from chessrl.lm.models import build_model

    start, _ = build_model("tiny", seed=11)
    assert not torch.allclose(grpo_alone, start.lm_head.weight.detach(), atol=1e-6)  # a step was taken
