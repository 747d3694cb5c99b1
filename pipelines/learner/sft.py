"""The ``sft`` learner, in its Ray Train worker (:func:`train_loop_per_worker`, started by
:func:`pipelines.sft.run_sft` with an :class:`SftLoopConfig`): the model built from a preset or
loaded, TRL's SFTTrainer (or, on a CPU or with the legal-move loss,
:func:`own_loss_sft_trainer_class`) on the worker's shard of packed blocks, and the held-out
legal-move rate every ``eval_every`` steps (:class:`SftEval`);
:func:`pipelines.learner.trl.train_with_trl` does the resume, the reports and the checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from chessrl.lm.lm_eval import HeldoutPosition, evaluate_moves
from pipelines.learner import trl as trl_learner


@dataclass(frozen=True, kw_only=True)
class SftLoopConfig(trl_learner.TRLLoopConfig):
    """What the sft learner's workers read beside
    :class:`~pipelines.learner.trl.TRLLoopConfig`'s fields, built by the driver
    (:func:`pipelines.sft.loop_config`), frozen: the workers read it as attributes."""

    model: str
    """The preset the model is built from when there is no ``base_model``."""
    base_model: str | None
    """A saved policy to go on training (None: a new model of the preset)."""
    dropout: float | None
    """The model's dropout (None: the model's own)."""
    legal_loss_weight: float
    """The weight of the legal-move loss (0: none)."""
    soft_targets: bool
    """Whether the blocks carry soft targets over the legal moves (distillation from annotations)."""
    torch_compile: str
    """auto, always or never (:func:`chessrl.lm.models.resolve_compile`)."""
    max_length: int
    """Tokens a block (the blocks were packed to it)."""
    gradient_checkpointing: bool
    """Activation checkpointing, memory for compute."""
    text_format: str
    """The text format the held-out positions are asked in (:mod:`chessrl.lm.formats`)."""
    heldout: list[HeldoutPosition]
    """The held-out positions whose legal-move rate and top-1 agreement rank 0 measures."""


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Runs in every Ray Train worker: build or load the model, train with TRL, report to Ray.
    ``loop_config`` is Ray Train's: an :class:`SftLoopConfig` under ``config``
    (:meth:`~pipelines.learner.WorkerConfig.of`)."""
    import ray.train
    from trl import SFTConfig, SFTTrainer

    from chessrl.arena.saved_models import load_saved_model
    from chessrl.lm.models import build_model, resolve_compile, set_dropout

    cfg = SftLoopConfig.of(loop_config)
    if cfg.base_model:
        model, tokenizer = load_saved_model(cfg.base_model, "policy")
    else:
        model, tokenizer = build_model(cfg.model, seed=cfg.seed)
    if cfg.dropout is not None:
        set_dropout(model, cfg.dropout)
    legal_weight = float(cfg.legal_loss_weight)
    setup = trl_learner.worker_setup(cfg)
    shard = ray.train.get_dataset_shard("train")
    train = trl_learner.stream_dataset(lambda: enumerate(sft_blocks(shard, cfg.seed, legal_weight)))
    compiled = resolve_compile(cfg.torch_compile, cfg.max_steps)
    args = trl_learner.training_arguments(
        SFTConfig,
        cfg,
        "sft",
        setup,
        weight_decay=0.01,
        adam_beta2=0.95,
        logging_steps=max(1, min(10, cfg.eval_every)),
        max_length=cfg.max_length,
        dataset_kwargs={"skip_prepare_dataset": True},
        activation_checkpointing=bool(cfg.gradient_checkpointing),
        torch_compile=compiled,
    )
    # TRL's own loss on a GPU (its fused LM head saves memory) unless the legal-move loss needs
    # the logits; the model's own cross-entropy on a CPU (see own_loss_sft_trainer_class)
    soft = bool(cfg.soft_targets)
    base = (
        SFTTrainer
        if setup.use_gpu and not legal_weight and not soft
        else own_loss_sft_trainer_class(legal_weight, compiled, soft)
    )

    class ShardSFTTrainer(trl_learner.OwnShardLoader, base):  # type: ignore[misc, valid-type]
        """The trainer reading this worker's own shard as is (as reward's and dpo's do)."""

    ShardSFTTrainer.__name__ = base.__name__  # the worker's log line names the loss's trainer
    trainer = ShardSFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    note = f", {type(trainer).__name__}" + (", torch.compile" if compiled else "")
    trl_learner.train_with_trl(trainer, "sft", cfg, setup, SftEval(cfg, setup, tokenizer), note)


def sft_blocks(shard: Any, seed: int, legal_weight: float) -> Iterator[dict[str, Any]]:
    """The training examples of this worker's shard, pass after pass (max_steps, not epochs,
    decides when training ends; the blocks were tokenised and packed in Ray Data, and each pass
    reshuffles them locally): ``input_ids``, ``labels`` and, with the legal-move loss, the
    block's legal moves."""
    import numpy as np

    for batches in trl_learner.shard_epochs(shard, seed):
        for batch in batches:
            for i, (row, length) in enumerate(zip(batch["input_ids"], batch["length"], strict=True)):
                # a fixed shape (no recompiles); the padding after the last game is not a target
                ids = row.tolist()
                keep = np.arange(len(ids)) < length
                if "targets" in batch:  # answer-only: the board's squares are read, not learnt
                    keep &= batch["targets"][i].astype(bool)
                labels = np.where(keep, row, -100).tolist()
                example = {"input_ids": ids, "labels": labels}
                if legal_weight or "legal_weights" in batch:
                    example["legal_moves"] = batch["legal_moves"][i]
                    example["legal_counts"] = batch["legal_counts"][i]
                if "legal_weights" in batch:  # distillation: soft targets over the legal moves
                    example["legal_weights"] = batch["legal_weights"][i]
                yield example


class SftEval(trl_learner.LearnerCallback):
    """Tokens/s with the loss; legal-move rate and top-1 agreement on held-out positions;
    everything also to the phase's MLflow run (rank 0).

    ``train_tokens_per_s`` is this worker's steady rate: tokens of steps 2..N over their wall
    time, held-out evaluations excluded (checkpoint saves included)."""

    def __init__(self, cfg: SftLoopConfig, setup: trl_learner.WorkerSetup, tokenizer: Any) -> None:
        super().__init__(cfg, setup)
        self.cfg: SftLoopConfig = cfg
        self.tokenizer = tokenizer
        self.heldout = list(cfg.heldout)
        self.tokens_per_step = cfg.batch_size * cfg.max_length
        self.tokens_seen = 0.0
        self.clock = time.perf_counter()
        self.mark: float | None = None
        self.train_time, self.steps_timed = 0.0, 0
        self.figures = ""

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if not logs:
            return
        if "num_tokens" in logs:
            now = time.perf_counter()
            logs["tokens_per_s"] = (logs["num_tokens"] - self.tokens_seen) / max(1e-9, now - self.clock)
            self.tokens_seen, self.clock = logs["num_tokens"], now
        if self.mlflow is not None:
            self.mlflow.log(logs, step=state.global_step)
        if "loss" in logs and self.rank == 0:
            self.figures = f"loss {float(logs['loss']):.3f}" + (
                f", {logs['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in logs else ""
            )
            self.report(state, self.figures)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        now = time.perf_counter()
        if self.mark is not None:
            self.train_time += now - self.mark
            self.steps_timed += 1
        if self.eval_due(state):
            metrics = {
                f"heldout_{k}": v
                for k, v in evaluate_moves(
                    kw["model"], self.tokenizer, self.heldout, text_format=self.cfg.text_format
                ).items()
            }
            metrics["heldout_eval_s"] = time.perf_counter() - now
            if self.steps_timed:
                metrics["train_tokens_per_s"] = self.steps_timed * self.tokens_per_step / self.train_time
            self.record(state, metrics)
            if self.rank == 0:
                self.report(
                    state,
                    ", ".join(
                        filter(
                            None,
                            (
                                self.figures,
                                f"held-out legal {metrics['heldout_legal_rate']:.1%}",
                                f"top-1 {metrics['heldout_top1_agreement']:.1%}",
                            ),
                        )
                    ),
                    show=True,
                )
            self.clock += metrics["heldout_eval_s"]  # tokens/s counts training time only
        self.mark = time.perf_counter()


def own_loss_sft_trainer_class(
    legal_weight: float = 0.0, compile_loss: bool = False, soft: bool = False
) -> type:
    """TRL's SFTTrainer with the model's own cross-entropy in ``compute_loss`` (for CPU training)
    plus, when ``legal_weight`` > 0, that weight times the legal-move loss, in one pass over the
    vocabulary (:func:`chessrl.lm.legality.lm_and_legal_loss`; ``compile_loss``: torch.compile'd,
    which cut its cost from +27% to +5% of a tiny CPU step).

    TRL computes the loss through its fused LM head (log-probabilities in tiles, plus entropy and
    top-1 for its metrics), which saves GPU memory. On a CPU, for a small model whose LM head is a
    large share of the FLOPs (tiny: 4k-token vocabulary, 192 wide), it costs about 45% more per
    step than the model's own loss (0.96 s against 0.66 s per 16 x 256 step, 2 threads). The data
    handling, optimizer, schedule, logging and checkpoints stay TRL's and transformers'; token
    accuracy and the token count are still logged, and with the legal-move loss its value
    (``legal_loss``) and the probability the model gives legal moves (``legal_mass``).

    With ``soft`` (distillation from annotated positions), the answer's move is learnt from its
    soft target over the legal moves instead (:func:`chessrl.lm.legality.lm_and_soft_move_loss`;
    ``soft_loss`` and ``legal_mass`` logged).
    """
    from transformers import Trainer
    from trl import SFTTrainer

    move_loss = move_loss_function(legal_weight, compile_loss)
    with_targets = bool(legal_weight) or soft

    class OwnLossSFTTrainer(SFTTrainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if with_targets:
                self.data_collator = with_legal_moves(self.data_collator)

        def _set_signature_columns_if_needed(self) -> None:
            super()._set_signature_columns_if_needed()
            if with_targets:  # keep the legal moves (and their weights) for the collator
                extra = ["legal_moves", "legal_counts", *(["legal_weights"] if soft else [])]
                self._signature_columns = [*self._signature_columns, *extra]

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            legal = inputs.pop("legal_moves", None)
            weights = inputs.pop("legal_weights", None)
            mode = "train" if model.training else "eval"
            logging = (
                mode == "eval" or (self.state.global_step + 1) % max(1, int(self.args.logging_steps)) == 0
            )
            if legal is not None and with_targets:
                loss, outputs = loss_with_targets(
                    self,
                    model,
                    inputs,
                    (legal, weights),
                    num_items_in_batch,
                    move_loss,
                    mode if logging else None,
                )
            else:
                loss, outputs = Trainer.compute_loss(
                    self, model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
                )
            log_token_figures(self, inputs, outputs, mode, logging)
            return (loss, outputs) if return_outputs else loss

    return OwnLossSFTTrainer


def move_loss_function(legal_weight: float, compile_loss: bool) -> Callable[..., tuple[Any, str, Any, Any]]:
    """``move_loss(logits, labels, legal, weights, num_items)``: the loss, its move term's metric
    name and value, and the legal mass: the soft targets' cross-entropy where the batch has
    weights (:func:`chessrl.lm.legality.lm_and_soft_move_loss`), else the legal-move loss at
    ``legal_weight`` (:func:`chessrl.lm.legality.lm_and_legal_loss`); torch.compile'd with
    ``compile_loss``."""
    import torch

    from chessrl.lm.legality import lm_and_legal_loss, lm_and_soft_move_loss

    loss_fn = torch.compile(lm_and_legal_loss, dynamic=False) if compile_loss else lm_and_legal_loss
    soft_fn = torch.compile(lm_and_soft_move_loss, dynamic=False) if compile_loss else lm_and_soft_move_loss

    def move_loss(
        logits: Any, labels: Any, legal: Any, weights: Any, num_items: Any
    ) -> tuple[Any, str, Any, Any]:
        if weights is not None:
            loss, _, term, mass = soft_fn(logits, labels, legal, weights, num_items, legal_weight)
            return loss, "soft_loss", term, mass
        loss, _, term, mass = loss_fn(logits, labels, legal, legal_weight, num_items)
        return loss, "legal_loss", term, mass

    return move_loss


def loss_with_targets(
    trainer: Any,
    model: Any,
    inputs: dict[str, Any],
    targets: tuple[Any, Any],
    num_items: Any,
    move_loss: Callable[..., tuple[Any, str, Any, Any]],
    logged: str | None,
) -> tuple[Any, Any]:
    """``(loss, outputs)`` of a batch with legal moves (and soft weights) in ``targets``: one
    forward pass, :func:`move_loss_function`'s loss, its figures into the trainer's metrics of
    mode ``logged`` (None: not on this step)."""
    legal, weights = targets
    labels = inputs["labels"]
    if num_items is not None and trainer.args.average_tokens_across_devices:
        # the count is over every worker and DDP averages gradients: the Trainer's own scaling
        # (Trainer.compute_loss multiplies the loss by the number of processes)
        num_items = num_items / trainer.accelerator.num_processes
    outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
    device = labels.device
    loss, name, term, legal_mass = move_loss(
        outputs.logits, labels, legal.to(device), None if weights is None else weights.to(device), num_items
    )
    if logged is not None:
        trainer._metrics[logged][name].append(term.item())
        trainer._metrics[logged]["legal_mass"].append(legal_mass.item())
    return loss, outputs


def with_legal_moves(
    collate: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> Callable[..., dict[str, Any]]:
    """``collate`` that also pads the examples' legal moves (``legal_moves``, ``legal_counts``)
    into the batch's ``legal_moves`` tensor, for the legal-move loss, and their soft targets'
    probabilities (``legal_weights``) when the examples have them."""
    import numpy as np
    import torch

    from chessrl.lm.legality import pad_legal_targets

    def collate_with_legal_moves(examples: list[dict[str, Any]]) -> dict[str, Any]:
        counts = [e.pop("legal_counts") for e in examples]
        legal = pad_legal_targets([e.pop("legal_moves") for e in examples], counts, multiple=32)
        extra = {}
        if "legal_weights" in examples[0]:  # the soft targets' probabilities, padded alike
            weights = pad_legal_targets(
                [e.pop("legal_weights") for e in examples], counts, multiple=32, fill=0.0, dtype=np.float32
            )
            extra["legal_weights"] = torch.from_numpy(weights)
        return {**collate(examples), "legal_moves": torch.from_numpy(legal), **extra}

    return collate_with_legal_moves


def log_token_figures(trainer: Any, inputs: dict[str, Any], outputs: Any, mode: str, logging: bool) -> None:
    """The token figures TRL logs, for a loss computed outside its fused head: the token accuracy
    on the steps that log (an argmax over every logit costs ~3% a step) and the count of training
    tokens, each summed over the workers."""
    import torch

    if logging:
        with torch.no_grad():
            labels = inputs["labels"][:, 1:]
            mask = labels != -100
            correct = ((outputs.logits[:, :-1].argmax(-1) == labels) & mask).sum()
            both = torch.stack([correct, mask.sum()]).view(1, 2)
            counts = trainer.accelerator.gather_for_metrics(both).sum(0)
        trainer._metrics[mode]["mean_token_accuracy"].append((counts[0] / counts[1].clamp(min=1)).item())
    if mode == "train":
        tokens = torch.tensor(inputs["input_ids"].numel(), device=inputs["input_ids"].device)
        trainer._total_train_tokens += int(
            trainer.accelerator.gather_for_metrics(tokens.view(1)).sum().item()
        )
    trainer._metrics[mode]["num_tokens"] = [trainer._total_train_tokens]
