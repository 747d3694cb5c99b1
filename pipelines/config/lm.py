"""The sections of the language-model phases: ``sft`` trains the policy, ``preferences`` labels
its moves with Stockfish or a trained judge, ``reward`` and ``dpo`` learn from those pairs
(``ppo`` and ``grpo`` are :mod:`pipelines.config.rl`'s); and :data:`BatchSize`, the
``batch_size`` that may be ``auto``. The learner sections take their workers, CPUs, GPUs and precision from
:mod:`pipelines.config.resources`; rules among a section's own keys are its validators, so a
file or a flag that breaks one is refused when the config loads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from cluster.config import ModelPath, Section
from pipelines.config.resources import TrainerResources


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
    actors, batched) -> Stockfish scores them (EnginePool), or a trained judge does (``judge:
    model``, RewardServer actors) -> chosen/rejected pairs as Parquet."""

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
    judge: Literal["stockfish", "model"] = "stockfish"
    """What ranks the moves: ``stockfish`` (its move at ``nodes`` is the chosen one, each proposal
    scored by a search of the position after it) or ``model`` (a trained reward model,
    ``reward_model``, on RewardServer actors: it scores every legal move, its best is the chosen
    one, and pairs keep ``judge_margin``; no Stockfish is started). Scores are written in the
    pairs as centipawns with stockfish, as the judge's normalised score x 100 with model."""
    reward_model: ModelPath | None = None
    """judge model: the reward model that ranks (a ``chess-rl reward`` output; required, since
    this run's reward phase trains on these very pairs)."""
    judge_margin: float = Field(0.5, ge=0)
    """judge model: a legal proposal is rejected when the judge scores it at least this much
    (normalised units: the judge's training-score std) below its best move."""
    judge_servers: int = Field(1, ge=1)
    """judge model: RewardServer replicas (a CPU each)."""
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

    @model_validator(mode="after")
    def _judge_needs_a_model(self) -> PreferencesConfig:
        if self.judge == "model" and not self.reward_model:
            raise ValueError(
                "preferences.judge (--judge) is model but preferences.reward_model (--reward-model) is not "
                "set: name a trained reward model (a `chess-rl reward` output), or use --judge stockfish"
            )
        return self


class RewardConfig(TrainerResources):
    """``reward``: preference pairs -> a reward model (GPT2ForSequenceClassification, one label),
    trained with TRL's RewardTrainer inside a Ray Train TorchTrainer."""

    preferences: str | None = None
    """The preference Parquet (default: this run's output of ``source``). Its ``train/`` shards are
    trained on and its ``heldout/`` shards measured; a folder without them is all training pairs,
    and every twentieth board (by a hash of its FEN) is held out."""
    source: Literal["preferences", "annotate"] = "preferences"
    """Whose pairs, when ``preferences`` names no folder: this run's ``preferences`` phase (the sft
    model's proposals judged by Stockfish) or ``annotate``'s (``<run>/annotate/pairs``: pairs of
    legal moves Stockfish valued, in positions of games of every level, lopsided ones too: what
    the judge that ranks moves best so far learnt from, docs/results.md)."""
    base_model: ModelPath | None = None
    """The backbone: a GPT-2-style checkpoint folder or s3:// prefix (default: this run's sft model,
    or a fresh ``model``). A new one-label score head is put on its transformer."""
    model: Literal["tiny", "small", "base"] | None = None
    """A fresh backbone of this preset's shape (random weights from the run's seed, the chess
    tokenizer; saved under ``<run>/reward/backbone``) instead of a base model: the facts judges of
    docs/results.md learnt their text from a fresh tiny GPT-2. Not with ``base_model``."""
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

    @model_validator(mode="after")
    def _one_backbone(self) -> RewardConfig:
        if self.model and self.base_model:
            raise ValueError(
                f"model ({self.model}: a fresh backbone) and base_model ({self.base_model}) are both set: "
                "unset one (model: null for the base model's weights)"
            )
        return self


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
