"""``selfplay``'s section: AlphaZero-style training of the MCTS network (collectors, replay,
learner, arena gating)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cluster.config import Section


class SelfplayConfig(Section):
    """``selfplay``: AlphaZero-style training: collectors (batched MCTS) -> replay shards -> a Ray
    Train learner -> the parameter server, with arena gating. Flag names and defaults of the
    first group are seed ChessBrain's: the tiny preset, a bare command's, sets five of them (each
    says its value); with those, the defaults train a 2-block, 32-channel network in about 15
    minutes on 2 CPUs."""

    episodes: int = Field(4, ge=1)
    """Self-play games per iteration: the learner trains after every this many new games (the tiny
    preset: 16)."""
    batch_size: int = Field(16, ge=1)
    """Positions per learner step (per worker; the tiny preset: 128)."""
    checkpoint_interval: int = Field(2, ge=1)
    """Iterations between checkpoints (<run>_stepXXXX.pt) and arena gates (the tiny preset: 3; a
    gate costs ~40% of one of its iterations on 2 CPUs)."""
    exploration_rate: float = Field(0.1, ge=0, le=1)
    """Share of Dirichlet noise mixed into the root priors of self-play searches (the tiny preset: 0.25)."""
    grad_accum_steps: int = Field(1, ge=1)
    """Micro-batches accumulated per optimizer step."""
    mcts_simulations: int = Field(32, ge=1)
    """MCTS simulations per move."""
    mcts_cpuct: float = Field(1.5, gt=0)
    """PUCT exploration constant."""
    search: Literal["puct", "gumbel"] = "puct"
    """Root search: puct (AlphaZero: Dirichlet root noise, visit counts as policy targets) or gumbel
    (Gumbel root search, Danihelka et al. 2022: Gumbel-top-k root moves, sequential halving, the
    completed-Q improved policy as targets; needs fewer simulations)."""
    producer_workers: int = Field(0, ge=0)
    """Self-play collector actors feeding the learner asynchronously (0: the learner plays its
    own games between training rounds; the tiny preset: 1)."""
    producer_queue_size: int = Field(16, ge=1)
    """Replay shards waiting for the learner before collectors block (backpressure)."""
    producer_device: Literal["cpu", "cuda"] = "cpu"
    """Where collectors run their network (cuda: each collector takes a GPU)."""
    amp: bool = True
    """Mixed precision (bf16/fp16 autocast) for the learner on CUDA; --no-amp turns it off."""

    iterations: int = Field(200, ge=1)
    """Learner iterations (each: wait for `episodes` games, train, publish)."""
    time_limit_minutes: float | None = Field(12.0, gt=0)
    """Stop iterating after this many minutes of learning, counted over resumed runs too (the
    final evaluation comes after; null: run every iteration)."""
    concurrent_games: int = Field(16, ge=1)
    """Games each collector plays at once (their leaves share one network call)."""
    max_plies: int = Field(160, ge=1)
    """A self-play game still going after this many plies is adjudicated."""
    adjudicate_material: int = Field(3, ge=0)
    """At max_plies a side ahead by this many pawns wins (0: always a draw)."""
    temperature_plies: int = Field(20, ge=0)
    """Self-play plies whose move is sampled from the visit counts (argmax after)."""
    dirichlet_alpha: float = Field(0.3, gt=0)
    """Concentration of the root's Dirichlet noise."""
    fpu_reduction: float | None = None
    """First-play urgency: unset scores unvisited moves 0 (AlphaZero); a number scores them as the
    node's mean value minus it (Leela Chess Zero)."""
    blocks: int = Field(2, ge=0)
    """Residual blocks of the network."""
    channels: int = Field(32, ge=1)
    """Convolution channels of the network."""
    history: int = Field(2, ge=1)
    """Positions of history in the input planes."""
    value_hidden: int = Field(32, ge=1)
    """Hidden units of the value head."""
    learning_rate: float = Field(2e-3, gt=0)
    """AdamW learning rate."""
    l2: float = Field(1e-4, ge=0)
    """L2 penalty on every weight (in the loss, as AlphaZero)."""
    train_ratio: float = Field(8.0, gt=0)
    """Positions trained per position generated."""
    window_positions: int = Field(20000, ge=1)
    """Sliding window: the newest shards holding about this many positions are trained on."""
    shard_positions: int = Field(256, ge=1)
    """Positions per replay shard."""
    learner_workers: int = Field(1, ge=1)
    """Ray Train workers of the learner."""
    replay_reader: Literal["parquet", "stream"] = "stream"
    """How the learner's workers read the replay window: ``stream`` (one Ray Data stream passing
    over the window as shards land, split across the workers, a quarter window read ahead) or
    ``parquet`` (each worker starts a ``ray.data.read_parquet`` of its share of the window every
    pass: ~1 s each). bench/replay_window.py compares them: the stream trained 7-9x faster on a
    small window."""
    use_gpu: bool = False
    """Train the learner on GPUs."""
    gate_games: int = Field(20, ge=0)
    """Games of each arena gate, new network against the best (0: no gating, every iteration's
    network goes to the collectors); rounded up to an even number (each opening from both sides)."""
    gate_threshold: float = Field(0.5, ge=0, le=1)
    """Score the new network needs against the best to be promoted (0.5: most gate games are draws
    early on, so a network that is not worse is promoted)."""
    gate_max_plies: int = Field(160, ge=1)
    """A gate game still going after this many plies is a draw."""
    eval_games: int = Field(40, ge=0)
    """Final evaluation: games of the best network against a random mover and against its
    generation-0 self (0: skip); rounded up to an even number."""
    eval_max_plies: int = Field(300, ge=1)
    """A final-evaluation game still going after this many plies is a draw."""
