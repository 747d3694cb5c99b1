"""The ``ppo`` learner, in its Ray Train worker (:func:`train_loop_per_worker`, started by
:func:`pipelines.ppo.run_ppo`): it publishes the policy's weights to the parameter server, reads
the rollout shards the collectors write until it has an iteration's episodes, takes PPO passes
of the policy and the critic, and publishes again; :class:`pipelines.learner.loop.LoopLearner`
does the resume, the reports, the checkpoints and the end.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from chessrl.rl.ppo_types import PPOSettings
from cluster.storage import Storage
from pipelines.learner import bf16_autocast, worker_place
from pipelines.learner.loop import LoopConfig, LoopLearner, export_pretrained, frozen_copy
from pipelines.learner.replay import DATASET, DONE, RolloutFeed, StreamFeed


@dataclass(frozen=True, kw_only=True)
class PPOLoopConfig(LoopConfig):
    """What the ppo learner's workers read, built by the driver (:func:`pipelines.ppo.loop_config`)
    beside :class:`~pipelines.learner.loop.LoopConfig`'s fields, frozen: the workers read it as
    attributes.

    Every field is the driver's to set: the defaults are the config sections' (``ppo``, ``run``).
    """

    policy_path: str
    """The start policy (a saved LM)."""
    settings: PPOSettings
    """The algorithm's knobs."""
    server_name: str
    """The parameter server actor's name (in ``namespace``)."""
    namespace: str | None
    """The parameter server's Ray namespace."""
    reward_path: str
    """The reward model the critic starts from ("": Stockfish grades the moves, and the critic is
    the policy's transformer under a new value head)."""
    seed: int
    """The run's seed (the minibatch order, the critic's new head)."""
    episodes_per_iteration: int
    """Episodes each iteration learns on."""
    max_staleness: int
    """Episodes played by a policy more than this many versions old are dropped."""
    critic_warmup: int
    """Iterations at the start that train the critic alone."""
    learning_rate: float
    """The policy's AdamW learning rate."""
    critic_learning_rate: float
    """The critic's AdamW learning rate."""
    threads: int
    """Torch threads per worker (at most the machine's CPUs)."""
    use_gpu: bool
    """Each worker on its GPU."""
    rollout_reader: str
    """How the workers get the rollout shards: ``arrow`` (the lead reads, all learn) or
    ``stream`` (Ray Data, each worker its split: :mod:`pipelines.learner.replay`)."""
    select_every: int = 0
    """Every this many iterations (and at the end) the lead saves the policy as a candidate under
    ``candidates/iteration-N`` (:func:`candidate_folder`); 0: none."""


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """The learner: publish, read new rollout shards, PPO-update, checkpoint; repeat.

    ``loop_config`` is Ray Train's: a :class:`PPOLoopConfig` under ``config``
    (:meth:`~pipelines.learner.loop.LoopConfig.of`). With several workers (``ppo.num_workers``)
    the first one publishes; with the ``arrow`` reader it also reads the shards and hands every
    iteration's episodes to all, each learning on every ``world``-th episode; with the
    ``stream`` each worker learns on the shards Ray Data hands it (:mod:`pipelines.learner.replay`).
    They average their gradients before each step (:mod:`chessrl.rl.data_parallel`)."""
    import ray
    import ray.data
    import torch

    from chessrl.rl.data_parallel import any_worker

    cfg = PPOLoopConfig.of(loop_config)
    torch.set_num_threads(max(1, min(int(cfg.threads), os.cpu_count() or 1)))
    ray.data.DataContext.get_current().enable_progress_bars = False
    rank, world, device = worker_place(cfg.use_gpu, "ppo")
    lead, stream = rank == 0, cfg.rollout_reader == "stream"
    parts = PPOParts.load(cfg, rank, world, device)
    policy, critic = parts.policy, parts.critic
    learner = LoopLearner(
        "ppo",
        cfg,
        {
            "iteration": 0,
            "version": 0,
            "read": [],
            "episodes": 0,
            "actions": 0,
            "stale_dropped": 0,
            "seconds": 0.0,
        },
        {"policy": policy, "critic": critic, "policy_opt": parts.policy_opt, "critic_opt": parts.critic_opt},
        lead=lead,
    )
    learner.resume("learner resumes at iteration {iteration} (version {version})")
    state = learner.state
    server = ray.get_actor(cfg.server_name, namespace=cfg.namespace) if lead or stream else None
    generator = torch.Generator().manual_seed(cfg.seed * 31 + state["iteration"] + 1009 * rank)
    rollouts = learner.phase.child("rollouts")
    feed: RolloutFeed | StreamFeed | None = None
    if stream:  # each worker its split of the stream
        feed = StreamFeed(ray.train.get_dataset_shard(DATASET), read=state["read"]).start()
    elif lead:  # the lead reads, then hands every iteration's episodes to all
        feed = RolloutFeed(rollouts, read=state["read"]).start()
    if lead:
        publish(server, policy, state)
    metrics: dict[str, Any] = {}
    while state["iteration"] < cfg.iterations and not any_worker(learner.out_of_time()):
        got = _learn_iteration(learner, parts, feed, server, generator, lead=lead, stream=stream, world=world)
        if got is None:
            break
        metrics = got
        learner.record(metrics, progress_line(metrics))  # its time: log_s of the next iteration
        if lead and cfg.select_every and state["iteration"] % cfg.select_every == 0:  # before its checkpoint:
            export_candidate(policy, parts.tokenizer, learner.phase, state["iteration"])  # a resume redoes it
        learner.maybe_checkpoint(metrics)  # its time: report_s of the next iteration
    _stop_reading(feed, server, rollouts, lead=lead)
    learner.finish(
        {
            **metrics,
            "iteration": state["iteration"],
            "episodes_total": state["episodes"],
            "actions_total": state["actions"],
            "stale_dropped": state["stale_dropped"],
        },
        export=(
            lambda: export_models(policy, critic, parts.tokenizer, learner.phase, cfg.select_every, state)
        )
        if lead
        and final_export_due(
            state["iteration"], learner.first_iteration, learner.phase.exists("model/config.json")
        )
        else None,
    )


def final_export_due(iteration: int, first_iteration: int, model_saved: bool) -> bool:
    """Whether the run's end exports its policy as ``model/``: when this run trained, or no model
    is saved yet. Not when it only resumed a finished run: ``ppo.select_every``'s kept policy
    is the model then, and the final one would overwrite it.

    >>> final_export_due(10, 6, model_saved=True), final_export_due(10, 10, model_saved=True)
    (True, False)
    >>> final_export_due(10, 10, model_saved=False)  # killed between the last checkpoint and the export
    True
    """
    return iteration > first_iteration or not model_saved


def _learn_iteration(
    learner: LoopLearner,
    parts: PPOParts,
    feed: RolloutFeed | StreamFeed | None,
    server: Any,
    generator: Any,
    *,
    lead: bool,
    stream: bool,
    world: int,
) -> dict[str, Any] | None:
    """One iteration on this worker: wait for its episodes (:func:`next_episodes`), learn on them,
    count them into the state, publish the new weights (the lead); the iteration's metrics (None
    on every worker when one is out of time)."""
    cfg, state = learner.cfg, learner.state
    assert isinstance(cfg, PPOLoopConfig)
    wait_started = time.perf_counter()
    actions = next_episodes(learner, feed, server, stream, world)
    if actions is None:
        return None
    wait_s = time.perf_counter() - wait_started
    learn_started = time.perf_counter()
    warmup = state["iteration"] < cfg.critic_warmup
    got = parts.learn(actions, warmup, generator, shared=not stream)
    learn_s = time.perf_counter() - learn_started
    state["iteration"] += 1
    figures = iteration_figures(actions, state["version"], stream)
    state["episodes"] += figures["episodes"]
    state["actions"] += figures.pop("actions")
    publish_started = time.perf_counter()
    if lead:
        publish(server, parts.policy, state)
    publish_s = time.perf_counter() - publish_started
    return {
        "iteration": state["iteration"],
        "version": state["version"],
        "critic_warmup": int(warmup),
        **{k: float(v) for k, v in got.items()},
        "episodes": figures["episodes"],
        "episodes_total": state["episodes"],
        **figures,
        "stale_dropped": state["stale_dropped"],
        "episodes_per_s": figures["episodes"] / max(wait_s + learn_s, 1e-9),
        "learner_step_s": learn_s,
        "wait_s": wait_s,
        "publish_s": publish_s,
        "report_s": learner.report_s,
        "log_s": learner.log_s,
        "elapsed_s": learner.tick(),
        "workers": world,
    }


def _stop_reading(
    feed: RolloutFeed | StreamFeed | None, server: Any, rollouts: Storage, *, lead: bool
) -> None:
    """After the last iteration: stop this worker's feed; on the ``lead``, mark the rollouts done
    (the stream's read task ends) and stop the parameter server."""
    import ray

    if feed is not None:
        feed.stop()
    if lead:
        assert server is not None
        rollouts.write_text(DONE, "")  # the stream's read task ends
        ray.get(server.stop.remote())


@dataclass
class PPOParts:
    """What one ppo learner worker trains, on its device: the policy, its frozen reference, the
    critic (initialised from the reward model, or from the policy when Stockfish scores), their optimizers, and what the update reads."""

    settings: PPOSettings
    policy: Any
    tokenizer: Any
    reference: Any
    critic: Any
    policy_opt: Any
    critic_opt: Any
    moves_table: Any
    pad: int
    device: Any
    rank: int
    world: int

    @classmethod
    def load(cls, cfg: PPOLoopConfig, rank: int, world: int, device: Any) -> PPOParts:
        """The models from ``cfg``'s paths, moved to ``device`` before their optimizers are made
        (a resume's optimizer state then lands on the same device)."""
        import torch

        from chessrl.arena.saved_models import load_saved_model
        from chessrl.lm.legality import MoveTokens

        policy, tokenizer = load_saved_model(cfg.policy_path, "policy")
        policy.to(device)
        if cfg.reward_path:
            critic, _ = load_saved_model(cfg.reward_path, "reward")
        else:  # Stockfish grades the moves: the critic is the policy's transformer under a value head,
            # the head seeded alike on every worker (data-parallel workers must start equal)
            from pipelines.learner.reward_model import reward_model_from_backbone

            torch.manual_seed(cfg.seed)
            critic, _ = reward_model_from_backbone(cfg.policy_path)
        critic.to(device)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return cls(
            cfg.settings,
            policy,
            tokenizer,
            frozen_copy(policy),
            critic,
            torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0),
            torch.optim.AdamW(critic.parameters(), lr=cfg.critic_learning_rate, weight_decay=0.0),
            MoveTokens(tokenizer),
            pad,
            device,
            rank,
            world,
        )

    def learn(
        self, actions: list[Any], warmup: bool, generator: Any, shared: bool = True
    ) -> dict[str, float]:
        """One iteration's PPO passes on this worker's share of ``actions`` (``shared``: every
        worker has them all; else they are this worker's already), the critic only during
        ``warmup``; the metrics over all workers."""
        from chessrl.rl.data_parallel import average_gradients, metrics_over_workers, sum_over_workers
        from chessrl.rl.ppo import make_batch, ppo_update

        # eval mode throughout (dropout off, as OpenRLHF does): the ratio compares the same function
        self.policy.eval()
        self.critic.eval()
        mine = my_share(actions, self.rank, self.world) if shared else actions
        # the reference's log-probs and the values in fp32, as the collectors' old log-probs are
        batch = make_batch(
            mine,
            self.reference,
            self.critic,
            self.pad,
            self.settings,
            moves_table=self.moves_table,
            sums=sum_over_workers if self.world > 1 else None,
        )
        # bf16 on a GPU for the critic; the policy's new log-probs stay fp32 (ppo_learner's policy_step)
        with bf16_autocast(self.device):
            got = ppo_update(
                self.policy,
                self.critic,
                None if warmup else self.policy_opt,
                self.critic_opt,
                batch,
                self.pad,
                self.settings,
                generator,
                **data_parallel_steps(
                    len(batch.rows), self.settings.minibatch, self.world, average_gradients
                ),
            )
        return metrics_over_workers(got, len(mine), sums=("actions",))


def my_share(actions: list[Any], rank: int, world: int) -> list[Any]:
    """This worker's actions: those of every ``world``-th episode (by name, so the workers agree),
    whole episodes, as GAE needs them."""
    if world == 1:
        return actions
    episodes = sorted({a.episode for a in actions})[rank::world]
    keep = set(episodes)
    return [a for a in actions if a.episode in keep]


def data_parallel_steps(rows: int, minibatch: int, world: int, reduce: Any) -> dict[str, Any]:
    """``ppo_update``'s data-parallel arguments: none for one worker; else the busiest worker's
    minibatch count and the gradient average."""
    import math

    from chessrl.rl.data_parallel import max_over_workers

    if world == 1:
        return {}
    return {"minibatches": int(max_over_workers(math.ceil(rows / minibatch))), "reduce": reduce}


def publish(server: Any, policy: Any, state: dict[str, Any]) -> None:
    """The policy's weights to the parameter server; ``state["version"]`` becomes their version."""
    import ray

    weights = {k: v.detach().cpu().numpy() for k, v in policy.state_dict().items()}
    state["version"] = ray.get(server.publish.remote(weights, state["version"]))


def next_episodes(
    learner: LoopLearner, feed: RolloutFeed | StreamFeed | None, server: Any, stream: bool, world: int
) -> list[Any] | None:
    """This iteration's actions on this worker (None on every worker when one is out of time).
    With the ``arrow`` feed: the lead's, handed to all. With the ``stream``: this worker's own,
    a ``world``-th of the episodes; the shards read and the stale episodes dropped are then
    gathered from all workers into every worker's state (the lead's is the one checkpointed)."""
    from chessrl.rl.data_parallel import any_worker, broadcast_objects, gather_objects

    state = learner.state
    if not stream:
        actions = take_episodes(learner, feed, server) if feed is not None else None
        (actions,) = broadcast_objects([actions])  # the lead's episodes (None: out of time), to all
        return actions  # type: ignore[return-value]
    if world > 1:  # the version the lead published: the staleness every worker measures against
        (state["version"],) = broadcast_objects([state["version"]])
    assert isinstance(learner.cfg, PPOLoopConfig) and feed is not None
    read, dropped = len(state["read"]), state["stale_dropped"]
    actions = take_episodes(learner, feed, server, -(-learner.cfg.episodes_per_iteration // world))
    if any_worker(actions is None):
        return None
    parts = gather_objects((state["read"][read:], state["stale_dropped"] - dropped))
    state["read"] = state["read"][:read] + sorted(name for names, _ in parts for name in names)
    state["stale_dropped"] = dropped + sum(n for _, n in parts)
    return actions


def take_episodes(
    learner: LoopLearner, feed: RolloutFeed | StreamFeed, server: Any, episodes_wanted: int | None = None
) -> list[Any] | None:
    """New shards' actions until ``episodes_wanted`` episodes (default: ``episodes_per_iteration``),
    those more than ``max_staleness`` versions old dropped (None: out of time). A collector's
    failure is raised."""
    import ray

    from chessrl.rl.ppo import actions_from_rows, stale_episodes

    cfg, state = learner.cfg, learner.state
    assert isinstance(cfg, PPOLoopConfig)
    actions: list[Any] = []
    episodes: set[str] = set()
    while len(episodes) < (episodes_wanted or cfg.episodes_per_iteration):
        if learner.out_of_time():
            return None
        ready = feed.take(timeout=0.5)
        if not ready:
            failure = ray.get(server.failure.remote())
            if failure:
                raise RuntimeError(f"a rollout collector failed: {failure}")
            continue
        for names, rows in ready:
            got = actions_from_rows(rows)
            stale = stale_episodes(got, state["version"], cfg.max_staleness)
            state["stale_dropped"] += len(stale)
            actions += [a for a in got if a.episode not in stale]
            episodes |= {a.episode for a in got if a.episode not in stale}
            state["read"] += names
    return actions


def iteration_figures(actions: list[Any], version: int, stream: bool) -> dict[str, Any]:
    """:func:`episode_figures` of the iteration's episodes and their ``actions`` count: of the
    actions every worker has, or (``stream``) of each worker's own, combined over the workers."""
    from chessrl.rl.data_parallel import metrics_over_workers

    figures = {**episode_figures(actions, version), "actions": len(actions)}
    if not stream:
        return figures
    sums, maxes = ("episodes", "table_episodes", "actions"), ("version_lag_max",)
    combined = metrics_over_workers(figures, len(actions), sums=sums, maxes=maxes)
    return {k: int(v) if k in sums + maxes else v for k, v in combined.items()}


def episode_figures(actions: list[Any], version: int) -> dict[str, Any]:
    """An iteration's episodes: how many (``table_episodes`` of them one move at a table
    position), the policy's own games' length and how they ended (wins and losses of the legal
    endings), and how many versions behind ``version`` their actions were played."""
    from chessrl.rl.ppo import is_table_episode

    lags = [version - a.version for a in actions]
    episodes = {a.episode for a in actions}
    table = {e for e in episodes if is_table_episode(e)}
    own = [a for a in actions if a.episode not in table]
    finished = [a for a in own if a.last]
    results = Counter(a.result for a in finished if a.legal)
    return {
        "episodes": len(episodes),
        "table_episodes": len(table),
        "episode_length": len(own) / max(1, len(episodes) - len(table)),
        "illegal_end_rate": sum(not a.legal for a in finished) / max(1, len(finished)),
        "win_rate": results[1.0] / max(1, len(finished)),
        "loss_rate": results[-1.0] / max(1, len(finished)),
        "version_lag_mean": sum(lags) / max(1, len(lags)),
        "version_lag_max": max(lags, default=0),
    }


def progress_line(metrics: dict[str, Any]) -> str:
    """An iteration's line on the driver's progress board."""
    return (
        f"score {metrics.get('score_mean', 0.0):+.3f}, reward {metrics['reward_mean']:+.3f}, KL {metrics['kl_to_ref']:.4f}, legal {metrics['legal_rate']:.1%}, "
        + ("critic warm-up, " if metrics["critic_warmup"] else f"clip {metrics.get('clipfrac', 0):.2f}, ")
        + f"value loss {metrics['value_loss']:.3f}, EV {metrics['explained_variance']:+.2f}, "
        f"{metrics['episodes']} episodes (lag <= {metrics['version_lag_max']}), "
        f"learn {metrics['learner_step_s']:.1f} s, wait {metrics['wait_s']:.1f} s"
    )


def export_models(
    policy: Any,
    critic: Any,
    tokenizer: Any,
    phase: Storage,
    select_every: int = 0,
    state: dict[str, Any] | None = None,
) -> None:
    """The policy (``model/``) and critic (``critic/``) as Hugging Face folders with the tokenizer;
    with ``select_every``, the final policy also as the candidate of its iteration (``state``'s)."""
    from chessrl.lm.checkpoints import make_tokenizer_config_generic

    for name, model in (("model", policy), ("critic", critic)):
        export_pretrained(model, tokenizer, phase.child(name), f"ppo-{name}-", make_tokenizer_config_generic)
    if select_every and state is not None and state["iteration"] % select_every:  # else saved already
        export_candidate(policy, tokenizer, phase, state["iteration"])


def export_candidate(policy: Any, tokenizer: Any, phase: Storage, iteration: int) -> None:
    """The policy at ``iteration`` as a Hugging Face folder under ``candidates/`` (``ppo.select_every``)."""
    from chessrl.lm.checkpoints import make_tokenizer_config_generic

    out = phase.child(candidate_folder(iteration))
    export_pretrained(policy, tokenizer, out, "ppo-candidate-", make_tokenizer_config_generic)


#: The file :func:`export_candidate` writes last (export_pretrained uploads in name order, each
#: file whole): a candidate folder that has it is complete.
CANDIDATE_LAST_FILE = "tokenizer_config.json"


def candidate_folder(iteration: int) -> str:
    """The folder, under the phase's, of the policy saved at ``iteration`` (``ppo.select_every``).

    >>> candidate_folder(25)
    'candidates/iteration-0025'
    """
    return f"candidates/iteration-{iteration:04d}"
