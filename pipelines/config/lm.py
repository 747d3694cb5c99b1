"""The sections of the language-model phases: ``sft`` trains the policy, ``preferences`` labels
its moves with Stockfish, ``reward`` and ``dpo`` learn from those pairs, ``ppo`` and ``grpo``
improve the policy by reinforcement learning; and :data:`BatchSize`, the ``batch_size`` that
may be ``auto``. The learner sections take their workers, CPUs, GPUs and precision from
:mod:`pipelines.config.resources`; rules among a section's own keys are its validators, so a
file or a flag that breaks one is refused when the config loads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from chessrl.data.positions import check_mix
from cluster.config import ModelPath, Section
from pipelines.config.resources import LearnerResources, TrainerResources


def positive_or_auto(value: int | str) -> int | str:
    """A ``batch_size``: an int of at least 1, or ``auto``."""
    if isinstance(value, int) and value < 1:
        raise ValueError("must be at least 1, or auto")
    return value


#: A batch size: an int of at least 1, or ``auto`` (probed: :mod:`pipelines.common.batch_size`).
BatchSize = Annotated[int | Literal["auto"], AfterValidator(positive_or_auto)]


class SftConfig(TrainerResources):
    """``sft``: the games table -> a GPT-2-style policy (Ray Train TorchTrainer + TRL SFTTrainer)."""

    games: str | None = None
    """Games Parquet to train on (default: <storage>/<run>/prepare/games)."""
    model: Literal["tiny", "small", "base"] = "tiny"
    """Model preset when not starting from --base-model."""
    base_model: ModelPath | None = None
    """Start from saved weights and tokenizer: a folder or s3:// prefix written by save_pretrained."""
    text_format: Literal["moves", "rookworld", "board", "facts"] = "moves"
    """How a game is written for the model: ``moves`` (the game's UCI moves), ``rookworld``
    (RookWorld-LM's tasks, positions of the games: policy ``P: <FEN> M: <move>`` and environment
    ``A: <FEN>+<move>+<history>+<next FEN>+<reward>+<terminated>+<truncated>``), ``board``
    (positions of the games in a fixed-length encoding, one character a square, then the move:
    ``<64 squares> <side> <castling> <en passant> M: <move>``) or ``facts`` (the board, then who
    controls each square, side, castling, en passant, and every legal move after what the rules
    say of it, a capture, a check or mate, a destination the opponent can take on:
    ``... [#] d1d8 d1e1 M: <move>``; ~150-350 tokens a position, so max_length must hold the data's longest)."""
    rookworld_env_share: float = Field(0.2, ge=0, le=1)
    """rookworld: share of environment-task texts (the rest are policy tasks)."""
    rookworld_positions_per_game: int = Field(8, ge=1)
    """rookworld, board and facts: texts cut from each training game (positions sampled without replacement)."""
    condition_on_result: bool = False
    """Prefix each game with its result (1-0, 0-1, 1/2-1/2) so play can be conditioned on it."""
    max_steps: int = Field(1000, ge=1)
    """Optimizer steps. On the demo corpus 1,000 end near 80% legal moves on held-out positions;
    500 reach about as many but play worse (top-1 agreement 13.5% against 22%); more overfit."""
    batch_size: BatchSize = 16
    """Sequences per device per step; auto: the largest that peaks under auto_batch_memory_share of the
    device's memory in a few probe steps (each in a fresh Ray worker), cached per (model, device, length)."""
    auto_batch_memory_share: float = Field(0.6, gt=0, le=1)
    """--batch-size auto: the share of the device's memory a step may peak at."""
    learning_rate: float = Field(3e-3, gt=0)
    """Peak learning rate (cosine decay after warm-up)."""
    warmup_steps: int = Field(50, ge=0)
    """Linear warm-up steps."""
    max_length: int = Field(256, ge=8)
    """Tokens per training sequence: games are packed end to end into blocks of this length."""
    dropout: float | None = Field(None, ge=0, lt=1)
    """Set every dropout of the model to this (null: the model's own; the presets have none)."""
    annotations: list[str] = Field(default_factory=list)
    """Distil Stockfish instead of cloning the games' moves: train on engine-annotated positions
    (folders written by ``chess-rl annotate``, their train/ shards together: a first run's and
    a DAgger round's). In the board and facts formats each position is asked as a board and
    answered by Stockfish's best move; in the moves format each annotated game (``annotate
    --whole-games``) is one sequence with a target at every annotated ply. The loss there is a
    cross-entropy against a soft target over every legal move, softmax(V / target_temperature) of
    their values on soft_target_scale (in the moves format with the legality term beside it,
    legal_loss_weight). The games table still gives the held-out positions."""
    soft_target_scale: Literal["margin", "expected"] = "margin"
    """The value of each legal move the soft target is the softmax of: ``expected``, Stockfish's
    expected score (flat once a game is won: every move that keeps the win gets the same share);
    ``margin``, half that and half a clipped-linear centipawn margin with a mate above it, the
    sooner the higher (:mod:`chessrl.engine.move_value`), so a won position still ranks a mate
    above a queen and a queen above a pawn. Its default temperature is 0.03 instead of 0.05: a
    move 0.1 of expected score worse in an undecided position is ~0.058 worse on this scale, so it
    keeps about the same share (0.15 against 0.14)."""
    target_temperature: float | None = Field(None, gt=0)
    """The soft target's temperature, in points of soft_target_scale: a move 0.1 worse than
    another gets exp(-0.1 / T) of its probability (0.14 at 0.05). null: 0.03 on the margin scale,
    0.05 on the expected scale (about the same sharpness)."""
    with_games: bool = True
    """With annotations in the moves format: also train on the games table's training games (each
    played move a hard target, the legality term beside it), their blocks shuffled in with the
    annotated games'. The annotated games alone are few (a game costs ~80 searches) and a tiny
    model overfits them: 2,000 steps on 830 games ended at 52% legal on held-out positions
    against 69% on its own blocks. false: the annotations alone. The board and facts formats ignore it."""
    flip: bool = True
    """With annotations in the board or facts format: also train on every position with the colours
    swapped (the board mirrored top to bottom, its moves too, the same values): twice the
    positions for free. The moves format has no flip (a game starts from the start position)."""
    legal_loss_weight: float | None = Field(None, ge=0)
    """Add this weight times -log P(legal moves) at every position to the cross-entropy: the rules
    of chess (python-chess) as a training signal next to the played move. It needs a tokenizer
    with one token per UCI move (the presets' chess tokenizer). null: 1.0 with such a tokenizer,
    off with another (a BPE --base-model); 0: off."""
    torch_compile: Literal["auto", "always", "never"] = "auto"
    """torch.compile the model (inductor): 1.5x faster per tiny step on 2 CPUs, after 20-40 s of
    compiling. auto: for runs of 500 steps or more, where a C++ compiler (g++, clang++) is found."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, about 45% more time per step (TRL
    turns it on by default; the presets fit without it)."""
    eval_every: int = Field(100, ge=1)
    """Steps between held-out evaluations (legal-move rate) and checkpoints."""
    heldout_fraction: float = Field(0.05, gt=0, lt=1)
    """Share of games (by game_id) kept out of training for evaluation."""
    heldout_positions: int = Field(200, ge=1)
    """Held-out positions the legal-move rate is measured on."""

    @field_validator("torch_compile", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        # YAML reads true/false/on/off as booleans: take them as always/never
        return {True: "always", False: "never"}.get(value, value) if isinstance(value, bool) else value


class PreferencesConfig(Section):
    """``preferences``: positions from the games table -> the policy proposes moves (PolicySampler
    actors, batched) -> Stockfish scores them (EnginePool) -> chosen/rejected pairs as Parquet."""

    games: str | None = None
    """The games table (default: this run's prepare output). Its split into training and held-out
    games is sft's (sft.heldout_fraction): held-out pairs come only from held-out games."""
    policy: ModelPath | None = None
    """The policy that proposes moves: a saved model folder or s3:// prefix (default: this run's sft model)."""
    positions: int = Field(1200, ge=1)
    """Positions sampled from the training games (one per game first, then more)."""
    heldout_positions: int = Field(120, ge=0)
    """Positions from the held-out games, for the held-out pairs (boards seen in training excluded)."""
    k: int = Field(4, ge=1)
    """Moves the policy proposes per position."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of the proposals (0: the greedy move, once)."""
    margin_cp: int = Field(50, ge=0)
    """A legal proposal is rejected when it scores at least this many centipawns below Stockfish's move."""
    random_moves: int = Field(1, ge=0)
    """Random legal moves per position that the policy did not propose, scored by Stockfish too:
    paired with Stockfish's move (kind "random") and ranked with the proposals, so the reward
    model also sees the moves no policy would play (one more search each)."""
    ranked_pairs: bool = True
    """Also pair the policy's legal proposals among themselves when they are margin_cp or more
    apart (the better one chosen, kind "ranked"): the reward model learns to rank the policy's own
    moves, not only to tell them from Stockfish's (which alone taught it "unlike the policy",
    anti-correlated with Stockfish over the legal moves)."""
    max_invalid_share: float = Field(0.25, ge=0, le=1)
    """Most share of a shard's pairs whose rejected move is illegal or unparseable."""
    nodes: int = Field(20000, ge=1)
    """Stockfish's node limit per position: its best move there is the chosen move."""
    engines: int | None = Field(None, ge=1)
    """Stockfish processes in the pool (default: one per CPU of the cluster; each reserves half a CPU)."""
    samplers: int = Field(1, ge=1)
    """PolicySampler actors (each holds a copy of the policy and takes a CPU)."""
    sampler_gpus: float = Field(0.0, ge=0)
    """GPUs each PolicySampler takes (a fraction shares one); 0: the CPU."""
    batch_positions: int = Field(64, ge=1)
    """Positions per batched generate call."""
    shard_positions: int = Field(256, ge=1)
    """Positions per Parquet shard (a shard is written whole; a re-run skips finished shards)."""
    min_ply: int = Field(0, ge=0)
    """Sample positions from this ply on."""


class RewardConfig(TrainerResources):
    """``reward``: preference pairs -> a reward model (GPT2ForSequenceClassification, one label),
    trained with TRL's RewardTrainer inside a Ray Train TorchTrainer."""

    preferences: str | None = None
    """The preference Parquet (default: this run's preferences output). Its ``train/`` shards are
    trained on and its ``heldout/`` shards measured; a folder without them is all training pairs,
    and every twentieth board (by a hash of its FEN) is held out."""
    base_model: ModelPath | None = None
    """The backbone: a GPT-2-style checkpoint folder or s3:// prefix (default: this run's sft model).
    A new one-label score head is put on its transformer."""
    text_format: Literal["moves", "board", "board-after", "facts", "rookworld"] | None = None
    """What the reward model reads: ``moves`` (the game so far and the move), ``board`` (the
    position before the move, one character a square, and the move: a judge that sees the
    board), ``board-after`` (the position after the move, and the move: a capture or a hung
    piece is on the squares it reads), ``facts`` (the board and who controls each square, then the
    move after what it wins, the room it makes, its facts and two digits of what it leaves
    hanging and what it threatens,
    :meth:`chessrl.lm.formats.FactsFormat.judged_text`: the learned layout that ranks moves best of those
    measured, docs/results.md); default: the backbone's text format
    (``chessrl_text_format`` in its config, else moves). Written into the saved model's
    config; the RewardServer reads it there."""
    max_steps: int = Field(300, ge=1)
    """Optimizer steps."""
    batch_size: int = Field(32, ge=1)
    """Pairs per worker per step (each pair is two sequences)."""
    learning_rate: float = Field(3e-4, gt=0)
    """Peak learning rate (linear warm-up, then cosine decay)."""
    warmup_steps: int = Field(20, ge=0)
    """Linear warm-up steps."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    center_rewards_coefficient: float | None = Field(0.01, ge=0)
    """TRL's auxiliary loss that keeps rewards centred on zero (null: off)."""
    eval_every: int = Field(50, ge=1)
    """Steps between held-out evaluations (pairwise accuracy, Spearman) and checkpoints."""
    heldout_pairs: int = Field(1000, ge=0)
    """Most held-out pairs the pairwise accuracy is measured on."""
    spearman_positions: int = Field(50, ge=0)
    """Held-out positions whose every legal move Stockfish scores once (kept under the phase's
    storage): the rank correlation between the model's scores and Stockfish's, per position."""
    spearman_nodes: int = Field(20000, ge=1)
    """Stockfish's node limit for those scores."""
    normalize_pairs: int = Field(1000, ge=1)
    """Training pairs whose scores (chosen and rejected) give the reward mean and std saved in the
    model's config (``chessrl_reward_mean`` / ``chessrl_reward_std``) for normalisation."""


class DPOConfig(TrainerResources):
    """``dpo``: the sft policy trained directly on the preference pairs with TRL's DPOTrainer
    inside a Ray Train TorchTrainer, the sft model its frozen reference."""

    policy: ModelPath | None = None
    """The starting policy: a saved model folder or s3:// prefix (default: this run's sft model).
    Its text format (``chessrl_text_format`` in its config, else moves) shapes each pair's prompt."""
    reference: ModelPath | None = None
    """The frozen reference of the DPO loss (default: the policy as it starts); same architecture
    and tokenizer as the policy."""
    preferences: str | None = None
    """The preference Parquet (default: this run's preferences output): ``train/`` shards are
    trained on, ``heldout/`` shards measured (a folder without them: every twentieth board held out)."""
    games: str | None = None
    """Games table whose held-out games give the paired move-quality positions (default: this
    run's prepare output; none: no paired measure)."""
    kinds: list[Literal["worse", "ranked", "random", "illegal", "unparseable"]] = Field(
        default_factory=lambda: ["worse", "ranked", "random", "illegal"], min_length=1
    )
    """The pair kinds trained on (a table without a kind column counts as worse)."""
    beta: float = Field(0.1, gt=0)
    """DPO's beta: how far the policy may move from the reference (the IPO loss: its regulariser)."""
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust", "apo_zero", "sppo_hard", "nca_pair"] = "sigmoid"
    """TRL's DPO loss variant: sigmoid (DPO), ipo, hinge (SLiC), robust, apo_zero, sppo_hard, nca_pair."""
    sft_weight: float = Field(0.0, ge=0)
    """Weight of TRL's "sft" loss (the chosen move's negative log-likelihood) beside the DPO loss
    (RPO); 0: none."""
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)
    """Conservative DPO / robust loss: the assumed share of pairs whose label is wrong."""
    max_steps: int = Field(300, ge=1)
    """Optimizer steps."""
    batch_size: int = Field(32, ge=1)
    """Pairs per worker per step (each pair is two sequences, and two more for the reference)."""
    learning_rate: float = Field(1e-4, gt=0)
    """Peak learning rate (linear warm-up, then cosine decay)."""
    warmup_steps: int = Field(10, ge=0)
    """Linear warm-up steps."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    eval_every: int = Field(50, ge=1)
    """Steps between held-out evaluations (the policy's choice accuracy on held-out pairs) and checkpoints."""
    heldout_pairs: int = Field(1000, ge=0)
    """Most held-out pairs measured."""
    heldout_positions: int = Field(1000, ge=0)
    """Positions of held-out games for the paired move quality of the start and final policies (0:
    none); 1,000 measure it to about 0.012 of half-width."""
    quality_nodes: int = Field(2000, ge=0)
    """Stockfish's node limit for the paired move quality (0: not measured)."""


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
    """The starting policy and frozen reference (default: this run's sft model of the text
    format: <run>/sft-rookworld/model for rookworld, <run>/sft-board/model for board, <run>/sft/model
    for moves)."""
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
