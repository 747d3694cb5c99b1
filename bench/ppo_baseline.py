"""The baseline of the PPO bench (``bench/rl_step.py``): the ``ppo`` phase's iterations in this
process with no Ray, sampling, scoring and training in turn. The policy plays rounds of
``concurrent_games`` episodes from the phase's start pool (:func:`episode_pool`) against the same
opponents, the reward model scores each step's legal moves in process (:class:`InProcessScorer`),
then :func:`chessrl.rl.ppo.make_batch` and :func:`chessrl.rl.ppo.ppo_update` learn on them.
:func:`baseline_run` is the whole side; the rest are its parts:

    b = baseline_run(policy, reward_model, cfg, games, iterations, seed, threads)
    b["samples_per_s"], b["sample_s"], b["score_s"], b["learn_s"]   # iterations 2..N+1
"""

from __future__ import annotations

import copy
import math
import time
from types import SimpleNamespace
from typing import Any


def episode_pool(
    games: str | None, cfg: Any, seed: int, heldout_fraction: float = 0.05
) -> list[tuple[str, ...]]:
    """The phase's start pool (:func:`pipelines.ppo.start_pool`): cut training games (sft's split at
    ``heldout_fraction``, the presets' 0.05), or the start position."""
    from pipelines.ppo import start_pool

    if not games:
        return [()]
    context = SimpleNamespace(
        config=SimpleNamespace(
            run=SimpleNamespace(seed=seed), sft=SimpleNamespace(heldout_fraction=heldout_fraction)
        )
    )
    return start_pool(context, cfg.model_copy(update={"games": games}))  # type: ignore[arg-type]


class InProcessScorer:
    """The reward model scoring each step's legal moves in this process (``score_ids`` on
    ``query_ids`` rows, normalised as the RewardServer does); ``seconds`` adds up its time."""

    def __init__(self, reward_path: str) -> None:
        from chessrl.rl.reward import Normalizer, load_reward_model

        self.model, self.tokenizer = load_reward_model(reward_path)
        self.normalizer = Normalizer.from_config(self.model.config)
        self.pad = self.tokenizer.pad_token_id
        if self.pad is None:
            self.pad = self.tokenizer.eos_token_id
        self.seconds = 0.0

    def __call__(self, queries: list[tuple[list[str], str]]) -> list[float]:
        from chessrl.rl.reward import RewardQuery, query_ids, reward_format, score_ids

        began = time.perf_counter()
        reads = reward_format(self.model.config)  # as the RewardServer asks it
        rows = [query_ids(self.tokenizer, RewardQuery(tuple(moves), move), reads) for moves, move in queries]
        out = [self.normalizer.apply(s) for s in score_ids(self.model, rows, self.pad)]
        self.seconds += time.perf_counter() - began
        return out


def baseline_models(
    policy_path: str, reward_path: str, cfg: Any, settings: Any, seed: int
) -> SimpleNamespace:
    """What the phase's learner and collectors hold, in this process: the policy, its frozen
    reference, the critic (a copy of the reward model), the in-process scorer, both optimisers,
    the move table, the seeded generator and the opponent pool (``self`` and ``random`` only)."""
    import torch

    from chessrl.lm.checkpoints import load_pretrained
    from chessrl.lm.legality import MoveTokens
    from chessrl.rl.ppo import policy_opponent, random_opponent
    from chessrl.rl.reward import load_reward_model

    policy, tokenizer = load_pretrained(policy_path)
    policy.eval()
    reference = copy.deepcopy(policy).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    critic, _ = load_reward_model(reward_path)
    scorer = InProcessScorer(reward_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    policy_opt = torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=cfg.critic_learning_rate, weight_decay=0.0)
    moves_table = MoveTokens(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    opponents = []
    for k, name in enumerate(cfg.opponents):
        if name == "self":
            opponents.append(policy_opponent(policy, tokenizer, moves_table, settings.temperature, generator))
        elif name == "random":
            opponents.append(random_opponent(seed * 7919 + k))
        else:
            raise SystemExit(f"rl_step: opponent {name!r} is not benched (self and random are)")
    return SimpleNamespace(
        policy=policy,
        tokenizer=tokenizer,
        reference=reference,
        critic=critic,
        scorer=scorer,
        pad=pad,
        policy_opt=policy_opt,
        critic_opt=critic_opt,
        moves_table=moves_table,
        generator=generator,
        opponents=opponents,
    )


def baseline_iteration(
    m: SimpleNamespace, starts: list[Any], cfg: Any, settings: Any, it: int
) -> tuple[dict[str, Any], float, float]:
    """One PPO iteration of the baseline on ``starts`` (a list of rounds): its result and its
    play and learn seconds. One round is :func:`chessrl.rl.ppo.ppo_iteration`; more are its steps,
    the episodes played in rounds as a collector plays them."""
    from chessrl.rl.ppo import make_batch, play_episodes, ppo_iteration, ppo_update

    if len(starts) == 1:
        got = ppo_iteration(
            m.policy,
            m.reference,
            m.critic,
            m.policy_opt,
            m.critic_opt,
            m.tokenizer,
            m.moves_table,
            starts[0],
            m.opponents,
            settings,
            cfg.max_actions,
            it,
            m.generator,
            m.scorer,
        )
        return got, got["play_s"], got["learn_s"]
    t0 = time.perf_counter()
    m.policy.eval()
    played = []
    for part in starts:
        played += play_episodes(
            m.policy,
            m.tokenizer,
            m.moves_table,
            part,
            m.opponents,
            settings,
            cfg.max_actions,
            it,
            m.generator,
            m.scorer,
        )
    t1 = time.perf_counter()
    m.critic.eval()  # both models in eval mode throughout, as in ppo_iteration and the learner
    batch = make_batch(played, m.reference, m.critic, m.pad, settings, moves_table=m.moves_table)
    got = ppo_update(m.policy, m.critic, m.policy_opt, m.critic_opt, batch, m.pad, settings, m.generator)
    return got, t1 - t0, time.perf_counter() - t1


def baseline_run(
    policy_path: str, reward_path: str, cfg: Any, games: str | None, iterations: int, seed: int, threads: int
) -> dict[str, Any]:
    """``iterations`` + 1 PPO iterations in this process, starting from :func:`episode_pool`
    (``games``, ``seed``); samples/s of all but the first."""
    import torch

    from chessrl.rl.ppo import start_positions
    from pipelines.ppo import ppo_settings

    pool = episode_pool(games, cfg, seed)
    torch.set_num_threads(threads)
    settings = ppo_settings(cfg)
    m = baseline_models(policy_path, reward_path, cfg, settings, seed)
    rows = [{"moves": " ".join(moves)} for moves in pool]
    rounds = math.ceil(cfg.episodes_per_iteration / cfg.concurrent_games)
    actions = episodes = 0
    started = time.perf_counter()
    play_s = learn_s = 0.0
    for it in range(iterations + 1):
        if it == 1:  # the warm-up iteration is over
            started, actions, episodes, play_s, learn_s = time.perf_counter(), 0, 0, 0.0, 0.0
            m.scorer.seconds = 0.0
        starts = [
            start_positions(
                rows,
                cfg.concurrent_games,
                seed=seed * 100_003 + it * 1000 + r,
                max_ply=10**6,
                prefix=f"b{it}-{r}",
            )
            for r in range(rounds)
        ]
        got, played_s, learned_s = baseline_iteration(m, starts, cfg, settings, it)
        play_s, learn_s = play_s + played_s, learn_s + learned_s
        actions += int(got["actions"])
        episodes += rounds * cfg.concurrent_games
    seconds = time.perf_counter() - started
    return {
        "samples_per_s": actions / seconds,
        "actions": actions,
        "episodes": episodes,
        "seconds": seconds,
        "play_s": play_s,
        "learn_s": learn_s,
        "episode_length": actions / max(1, episodes),
        "score_s": m.scorer.seconds,
        "sample_s": play_s - m.scorer.seconds,
    }
