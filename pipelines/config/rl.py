"""The sections of the reinforcement-learning phases that improve the policy: ``ppo`` (episodes
graded by a reward model or Stockfish) and ``grpo`` (groups of moves, and online DPO), with
:class:`PositionMix`, the positions grpo's prompts come from. Their workers, CPUs and GPUs are
:class:`pipelines.config.resources.LearnerResources`; rules among a section's own keys are its
validators, so a file or a flag that breaks one is refused when the config loads."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chessrl.data.positions import check_mix
from cluster.config import ModelPath, Section
from pipelines.config.lm import BatchSize
from pipelines.config.resources import LearnerResources


class PPOConfig(LearnerResources):
    """``ppo``: the sft policy plays against an opponent pool on rollout collectors, Stockfish or the
    reward model grades each move (RewardServer), and a Ray Train learner improves it with PPO
    (clipped surrogate, GAE, a critic, a KL penalty to the sft start)."""

    policy: ModelPath | None = None
    """The starting policy and frozen reference: a saved model folder or s3:// prefix (default: this run's sft model)."""
    reward_model: ModelPath | None = None
    """The reward model (default: this run's reward model); its tokenizer must be the policy's."""
    reward: Literal["model", "stockfish"] = "stockfish"
    """What scores each move: model (the reward model, on the reward servers; the critic starts
    from it) or stockfish (each move graded against Stockfish's best at reward_nodes, as grpo
    grades it, on reward_servers engines; the critic starts from the policy's transformer, and no
    reward model is read)."""
    reward_nodes: int = Field(2000, ge=1)
    """reward stockfish: the node limit of each position's search."""
    max_loss: float = Field(0.5, gt=0)
    """reward stockfish: the expected-score loss against the best move that scores 0 (the best 1)."""
    dead_zone: float = Field(0.02, ge=0, lt=1)
    """reward stockfish: losses up to this count as none (Stockfish's noise); below max_loss."""
    grade_scale: Literal["margin", "expected"] = "margin"
    """reward stockfish: the value scale a move's loss is measured on (chessrl.engine.move_value):
    margin (half expected score, half clipped centipawns with mate distance above the clip; a
    repetition, fifty-move claim or stalemate is a draw) keeps ranking moves once a game is won;
    expected (Stockfish's expected score alone, the grade before 2026-12) is flat there and blind
    to repetitions. Measured (bench/value_scale.py, 40 games, 200 nodes): a one-ply player
    following the grade scores 97.5% against a random mover on margin (38 mates), 50.0% on
    expected (every game drawn: 30 by threefold repetition)."""
    games: str | None = None
    """Games table the episodes start from (default: this run's prepare output; none: the start position)."""
    iterations: int = Field(100, ge=1)
    """Learner iterations (one policy version each)."""
    time_limit_minutes: float | None = Field(45.0, gt=0)
    """Stop the learner after this many minutes (the last iteration finishes); the default is a
    guard only: a run of the defaults ends on its iterations."""
    episodes_per_iteration: int = Field(80, ge=1)
    """Episodes the learner takes per iteration."""
    max_actions: int = Field(4, ge=1)
    """T: policy moves per episode at most."""
    max_start_ply: int = Field(40, ge=0)
    """Episodes start at a ply in [0, this] of a sampled game."""
    table_positions: float = Field(0.8, ge=0, le=1)
    """Share of each round's episodes that are one policy move at a position anywhere in a
    training game (the table's positions, as grpo's prompts), beside the episodes of the policy's
    own games (from plies <= max_start_ply, up to max_actions moves against the opponents). The
    paired quality is read on such positions of the held-out games; the head-to-head games are
    the policy's own."""
    opponents: list[str] = Field(default_factory=lambda: ["self", "random"], min_length=1)
    """Opponent pool, taken in turn: self (the policy as last pulled), random, stockfish[:skill=N|elo=N|nodes=N|random=P]."""
    stockfish_nodes: int = Field(1000, ge=1)
    """Node limit of a Stockfish opponent without its own."""
    collectors: int = Field(1, ge=1)
    """RolloutCollector actors."""
    concurrent_games: int = Field(80, ge=1)
    """Episodes each collector plays at once (one forward pass a move for all)."""
    max_staleness: int = Field(0, ge=0)
    """Most versions a sample's weights may lag the learner's; older episodes are dropped (0: the
    collectors wait for each version, so an iteration is its episodes, not what piled up)."""
    reward_servers: int = Field(1, ge=1)
    """RewardServer replicas (reward stockfish: Stockfish processes, spread over the nodes)."""
    reward_server_gpus: float = Field(0.0, ge=0)
    """GPUs each RewardServer takes (a fraction shares one: 0.25 puts four on a GPU); 0: the CPU."""
    kl_coef: float = Field(0.05, ge=0)
    """beta: the per-action k1 KL to the reference in the reward."""
    clip: float = Field(0.2, gt=0)
    """epsilon of the clipped surrogate."""
    value_clip: float = Field(1.0, gt=0)
    """Clip range of the value loss (returns span a few units with the reward model: the illegal
    penalty is -3)."""
    gamma: float = Field(0.0, ge=0, le=1)
    """Discount over the policy's moves. The reward is per move (the reward model's score of
    that move), so a move's own score is its credit: 0 (the default) keeps later
    moves' scores, which the action did not choose, out of its advantage; 1 adds them all."""
    lam: float = Field(0.95, ge=0, le=1)
    """GAE lambda (no effect at gamma 0)."""
    masked: bool = True
    """Sample the policy's moves from its distribution over the legal moves (their tokens'
    logits renormalised; the same masked log-probs in collectors, learner and reference): no
    illegal move ends an episode, the reward grades legal moves only, and legal_coef trains
    legality beside it."""
    ppo_epochs: int = Field(2, ge=1)
    """Passes over each iteration's experience."""
    minibatch: int = Field(256, ge=1)
    """Actions per optimiser step (a position's samples_per_state moves stay in one minibatch)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the policy's moves."""
    illegal_penalty: float = Field(-3.0, le=0)
    """Reward of an illegal or unparseable move (it ends the episode)."""
    result_weight: float = Field(0.0, ge=0)
    """Weight of the game result (+1/0/-1) added to an episode's last action."""
    entropy_coef: float = Field(0.0, ge=0)
    """Entropy bonus in the policy loss."""
    text_format: Literal["moves", "board", "facts"] | None = "board"
    """What the policy reads: moves (the game so far), board (the position, one character a
    square: `sft --text-format board`'s model) or facts (the board and what the rules say of it:
    `sft --text-format facts`'s); null: the format the policy was trained on
    (``chessrl_text_format`` in its config), else moves; a format other than the one the policy
    is recorded as (of these three) is a ConfigError. Set to board with no ``policy``, the start is this run's ``sft
    --text-format board`` model (``<run>/sft-board``; ``rlaif`` adds that node)."""
    samples_per_state: int = Field(8, ge=1, le=64)
    """k: moves drawn for each policy turn (masked only). The first is played; all are graded and
    each is scored against the mean grade of the other k - 1 (RLOO's leave-one-out baseline, a
    per-position one) instead of the batch's mean; the k - 1 not played are learned from as
    one-move episodes (gamma must be 0). 1: one move, the batch-mean baseline."""
    anchor_coef: float = Field(0.0, ge=0)
    """Weight of an NLL anchor on the best-graded of each position's samples_per_state moves
    (RPO's term, as online DPO's rpo_alpha), added to the policy loss; needs samples_per_state
    of 2 or more. 0: none."""
    legal_coef: float = Field(0.1, ge=0)
    """Weight of the auxiliary legal-move loss (-log of the probability on the legal moves) in the
    policy loss, as PPO-ptx mixes in the pretraining loss; 0: pure PPO, which on the demo leaked
    probability to illegal moves (sampled legal rate 76% -> 70%)."""
    learning_rate: float = Field(2e-4, gt=0)
    """Policy learning rate (AdamW)."""
    critic_learning_rate: float = Field(1e-4, gt=0)
    """Critic learning rate (AdamW)."""
    critic_warmup: int = Field(2, ge=0)
    """Iterations that train only the critic before the policy moves."""
    checkpoint_interval: int = Field(5, ge=1)
    """Save a learner checkpoint every this many iterations (and at the end)."""
    select_every: int = Field(0, ge=0)
    """Keep the policy that plays best against its start: every this many iterations (and at the
    end) the policy is saved under ``ppo/candidates/iteration-N``; after training each candidate
    plays ``select_games`` games against the start (both masked, openings from training games,
    adjudicated by Stockfish at ``select_max_plies``) and the best scorer becomes ``ppo/model``
    (ties: the earlier). 0: the final policy is the model."""
    select_games: int = Field(40, ge=2)
    """Games of each candidate against the start (``select_every``), colours alternating."""
    select_max_plies: int = Field(120, ge=10)
    """The ply at which a selection game is decided by Stockfish (ahead by 300 centipawns wins)."""
    heldout_positions: int = Field(1000, ge=0)
    """At the end, the greedy legal-move rate of the start policy and of the final one on this many
    positions of the held-out games (sft's split; 0: skip)."""
    quality_nodes: int = Field(2000, ge=0)
    """Stockfish's nodes a position for the start and final policies' paired move quality on the
    held-out positions (0: skip)."""
    learner_threads: int | None = Field(None, ge=1)
    """Torch threads of the learner (default: the CPUs the collectors and reward servers do not reserve)."""
    rollout_reader: Literal["arrow", "stream"] = "arrow"
    """How the learner's workers get the rollout shards: ``arrow`` (the first worker reads each
    new shard with pyarrow, milliseconds each, and hands every iteration's episodes to all) or
    ``stream`` (a Ray Data replay stream split across the workers, each learning on the shards it
    is handed: no broadcast; a few seconds to start). bench/rl_step.py --readers compares them."""

    @model_validator(mode="after")
    def _keys_that_go_together(self) -> PPOConfig:
        """The section's own rules: keys that only make sense together, one ValueError naming them."""
        k = self.samples_per_state
        if self.episodes_per_iteration < self.num_workers:
            raise ValueError(
                f"ppo.episodes_per_iteration (--episodes-per-iteration) is {self.episodes_per_iteration}, "
                f"fewer than ppo.num_workers (--num-workers) {self.num_workers}: each learner worker learns "
                "on whole episodes, at least one an iteration"
            )
        if k > 1 and not self.masked:
            raise ValueError(
                f"ppo.samples_per_state (--samples-per-state) is {k}: drawing several moves a position "
                "needs ppo.masked (--masked) true (every drawn move legal, so each can be graded)"
            )
        if k > 1 and self.gamma > 0:
            raise ValueError(
                f"ppo.samples_per_state (--samples-per-state) is {k} with ppo.gamma (--gamma) "
                f"{self.gamma:g}: the moves not played have no continuation, so each move's credit must be "
                "its own grade: set ppo.gamma 0"
            )
        if self.anchor_coef > 0 and k < 2:
            raise ValueError(
                f"ppo.anchor_coef (--anchor-coef) is {self.anchor_coef:g} with ppo.samples_per_state "
                f"(--samples-per-state) {k}: the anchor is on the best of the moves drawn in a position: "
                "draw 2 or more"
            )
        if self.select_every and self.select_every >= self.iterations:
            raise ValueError(
                f"ppo.select_every (--select-every) is {self.select_every}, not below ppo.iterations "
                f"(--iterations) {self.iterations}: the final policy would be the only candidate; set it "
                "lower, or 0 for no selection"
            )
        if self.reward == "stockfish" and self.dead_zone >= self.max_loss:  # Stockfish's grade reads them
            raise ValueError(
                f"ppo.dead_zone (--dead-zone) is {self.dead_zone:g}, not below ppo.max_loss (--max-loss) "
                f"{self.max_loss:g}: every move would grade as the best"
            )
        return self


class PositionMix(Section):
    """Shares of the game phases GRPO's positions are drawn from (normalised to sum 1)."""

    opening: float = Field(0.2, ge=0)
    """The first 20 plies (fewer than 14 pieces counts as an endgame)."""
    middlegame: float = Field(0.6, ge=0)
    """Everything else."""
    endgame: float = Field(0.2, ge=0)
    """Fewer than 14 pieces on the board, kings included."""

    @model_validator(mode="after")
    def _some_share(self) -> PositionMix:
        check_mix(self.model_dump())  # a ValueError when every share is 0
        return self


class GRPOConfig(LearnerResources):
    """``grpo``: groups of moves (masked by default) for positions of the games and of the
    policy's own games, each graded against Stockfish's best (EnginePool; RookWorld's environment
    tasks by python-chess), GRPO / Dr. GRPO / DAPO updates on a Ray Train learner, a KL penalty
    to the frozen start."""

    policy: ModelPath | None = None
    """The starting policy and frozen reference (default: this run's model that ``start`` names).
    A reward model (a scorer) is read as a policy: the softmax of its scores over the legal moves."""
    start: Literal["sft", "judge"] = "sft"
    """Which of this run's models is the default policy: ``sft``, the sft model of the text format
    (<run>/sft-rookworld/model for rookworld, <run>/sft-board/model for board, <run>/sft/model for
    moves), or ``judge``, this run's reward model (<run>/reward/model) read as a policy, in the
    format it was trained on (the facts judges beat a random mover 85-97%, docs/results.md)."""
    text_format: Literal["rookworld", "moves", "board", "facts"] = "board"
    """How positions are asked: rookworld (policy tasks P: <FEN> M: and environment tasks A: ...),
    moves (the game's moves so far, answered by the next move: the format sft trains by default),
    board (the position, one character a square: sft --text-format board) or facts (the board and
    what the rules say of it: sft --text-format facts); moves, board and facts have policy tasks
    only, so policy_share must be 1. One of these three asked of a policy trained on another is a
    ConfigError."""
    games: str | None = None
    """Games table the positions are cut from (default: this run's prepare output)."""
    iterations: int = Field(300, ge=1)
    """Optimizer steps (one batch of groups each): a run ends on them, not on the clock (a time
    limit makes a run depend on the machine's load)."""
    time_limit_minutes: float | None = Field(60.0, gt=0)
    """Stop after this many minutes (the iteration in progress finishes); the default is a guard
    only: 300 iterations take ~11 minutes on 2 quiet AMD EPYC cores."""
    prompts_per_iteration: int = Field(32, ge=1)
    """Prompts (groups) per batch."""
    group_size: int = Field(8, ge=2)
    """Completions sampled per prompt (a group of one has no advantage)."""
    policy_share: float = Field(1.0, ge=0, le=1)
    """Share of policy-task prompts; the rest are environment tasks (RookWorld: 0.8; the moves
    format: 1)."""
    position_mix: PositionMix = Field(default_factory=lambda: PositionMix())
    """Shares of the positions' phases (``--set grpo.position_mix.endgame=0.4``)."""
    loss_type: Literal["grpo", "dr_grpo", "dapo", "dpo"] = "grpo"
    """grpo: std-normalised advantages, per-sequence token mean; dr_grpo: no std, token sum over a
    constant length; dapo: clip-higher, token mean, zero-variance groups dropped; dpo: online DPO,
    each group's best and worst samples (pair_margin apart) a pair, DPO's loss (dpo_beta) against
    the frozen start plus an NLL anchor on the chosen move (rpo_alpha); outputs in <run>/online-dpo."""
    beta: float = Field(0.04, ge=0)
    """Weight of the k3 KL to the frozen reference (0: no reference; loss_type dpo: unused)."""
    dpo_beta: float = Field(0.5, gt=0)
    """loss_type dpo: DPO's beta, the frozen start's pull on the pairs' log-ratios."""
    pair_margin: float = Field(0.05, ge=0)
    """loss_type dpo: the least reward gap (expected score) between a group's best and worst
    samples that makes them a pair."""
    rpo_alpha: float = Field(0.2, ge=0)
    """loss_type dpo: weight of the NLL anchor on each pair's chosen move (RPO; 0: plain DPO)."""
    clip: float = Field(0.2, gt=0)
    """epsilon of the clipped surrogate (dapo: its lower side)."""
    clip_high: float = Field(0.28, gt=0)
    """dapo's upper clip (clip-higher)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the completions."""
    learning_rate: float = Field(2e-4, gt=0)
    """AdamW learning rate."""
    batch_size: BatchSize = 64
    """Completions per forward/backward pass (gradients accumulate over a whole iteration's
    groups); auto: the largest that peaks under auto_batch_memory_share of the device's memory,
    probed in fresh Ray workers and cached per (model, device, length)."""
    auto_batch_memory_share: float = Field(0.6, gt=0, le=1)
    """--batch-size auto: the share of the device's memory a step may peak at."""
    illegal_reward: float = -1.0
    """Policy-task reward of an illegal or unparseable move (the floor; legal moves score 0..1)."""
    max_loss: float = Field(0.5, gt=0)
    """Expected-score loss against Stockfish's best move that scores 0 on the policy task."""
    stockfish_nodes: int = Field(2000, ge=1)
    """Stockfish's node limit for the policy-task scores."""
    engines: int = Field(1, ge=1)
    """Stockfish processes in the engine pool."""
    max_new_tokens_policy: int | None = Field(None, ge=1)
    """Tokens a policy-task completion may take (default: 2 with the chess tokenizer, 8 with a BPE)."""
    max_new_tokens_environment: int = Field(128, ge=8)
    """Tokens an environment-task completion may take (a FEN is up to ~90 characters)."""
    checkpoint_interval: int = Field(20, ge=1)
    """Save a learner checkpoint every this many iterations (and at the end)."""
    heldout_positions: int = Field(1000, ge=0)
    """At the end, the start and final policies' greedy legal-move rate (policy task) and
    environment exact-match accuracy on this many positions of the held-out games, and their
    paired move quality on up to this many (masked argmax moves, Stockfish's expected-score loss
    at stockfish_nodes, at most 4 positions a game, the interval by game: the same figure as
    ``evaluate --mode paired --positions N --quality-nodes stockfish_nodes`` with the run's seed;
    0: skip)."""
    masked: bool = True
    """Sample policy-task moves from the policy restricted to the legal moves (their tokens'
    logits renormalised; the chess tokenizer's one token per move), the same masked log-probs in
    learner and reference: rewards grade quality alone. Off: sample the whole vocabulary, an
    illegal move scoring illegal_reward."""
    legal_weight: float = Field(0.1, ge=0)
    """masked: weight of the legality term, -log P(legal moves) under the full vocabulary, that
    keeps the unmasked model's moves legal while the masked objective trains their quality."""
    grade_scale: Literal["margin", "expected"] = "margin"
    """The value scale a policy-task move's loss is measured on (chessrl.engine.move_value; as
    ppo.grade_scale): margin keeps ranking moves once a game is won and grades a repetition (where
    the prompt's moves show it), fifty-move claim or stalemate as the draw it is; expected is
    Stockfish's expected score alone, the grade before 2026-12."""
    dead_zone: float = Field(0.02, ge=0, lt=1)
    """Expected-score losses up to this count as the best move's (Stockfish's noise at
    stockfish_nodes); below max_loss."""
    std_floor: float = Field(0.1, ge=0)
    """grpo/dapo: the smallest group std the advantages are divided by, so a group whose rewards
    differ by engine noise alone gets small advantages, not full-size ones."""
    drop_flat: bool = False
    """Leave groups whose rewards are all equal (every move as good) out of the update."""
    own_positions: float = Field(0.5, ge=0, le=1)
    """Share of each iteration's prompts taken from games the current policy plays against
    itself (masked samples, continued from positions of the training games), the rest from
    the games table: the positions the policy reaches, where it is weakest. Needs masked."""
    own_opponent: Literal["self", "random", "start", "random+start"] = "random+start"
    """Who the policy plays in those games: itself, a random legal mover, its frozen start (the
    sft model, its masked argmax), or random and start alternating game by game."""

    @model_validator(mode="after")
    def _keys_that_go_together(self) -> GRPOConfig:
        """The section's own rules: keys that only make sense together, one ValueError naming them."""
        own, share = self.own_positions, self.policy_share
        if self.start == "judge" and self.policy:
            raise ValueError(
                f"grpo.start (--start) is judge, but grpo.policy (--policy) names {self.policy}: unset one "
                "(start: judge trains this run's reward model; a policy given is trained instead)"
            )
        if self.text_format != "rookworld" and share < 1:
            raise ValueError(
                f"grpo.policy_share (--policy-share) is {share:g}, but the {self.text_format} format of "
                "grpo.text_format (--text-format) has no environment task: set policy_share to 1, or "
                "text_format to rookworld"
            )
        if self.prompts_per_iteration < self.num_workers:
            raise ValueError(
                f"grpo.prompts_per_iteration (--prompts-per-iteration) is {self.prompts_per_iteration}, "
                f"fewer than grpo.num_workers (--num-workers) {self.num_workers}: each learner worker needs "
                "at least one prompt an iteration"
            )
        if own > 0 and not self.masked:
            raise ValueError(
                f"grpo.own_positions (--own-positions) is {own:g}: the policy's own games are played with "
                "masked moves; set grpo.masked (--masked) too, or own_positions to 0"
            )
        if own > 0 and share < 1:
            raise ValueError(
                f"grpo.own_positions (--own-positions) is {own:g}: own positions are asked as policy tasks "
                "only; set grpo.policy_share (--policy-share) to 1, or own_positions to 0"
            )
        if self.dead_zone >= self.max_loss:
            raise ValueError(
                f"grpo.dead_zone (--dead-zone) is {self.dead_zone:g}, not below grpo.max_loss (--max-loss) "
                f"{self.max_loss:g}: every move would grade as the best"
            )
        return self
