"""sft's compiled path without Ray: the trainer the sft worker builds (its own loss with the
legal-move term, torch.compile'd), on the worker's training arguments with ``torch_compile`` on,
resumes from an eager run's checkpoint and writes checkpoints of the plain GPT-2 (no
``_orig_mod.`` of torch.compile), which an eager run resumes from in turn.

The model is compiled with ``aot_eager`` (dynamo's capture and AOTAutograd, the wrapper that
names the weights; inductor's C++ kernels for the GPT-2 cost ~20 s more on 2 CPUs, and are
torch's, not this project's); the legal-move loss is compiled as sft compiles it, with inductor.
The kill and resume of the sft driver through Ray Train is ``integration/test_sft.py``'s."""

from __future__ import annotations

import itertools
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from transformers import GPT2Config, GPT2LMHeadModel, TrainerCallback
from trl import SFTConfig

from chessrl.lm.legality import MoveTokens, legal_move_targets
from chessrl.lm.tokenizer import build_chess_tokenizer
from pipelines.learner import trl as trl_learner
from pipelines.learner.sft import own_loss_sft_trainer_class

LENGTH = 32
GAME = "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6 e1g1 f8e7 f1e1 b7b5 a4b3 d7d6 c2c3 e8g8"


class FirstStepWeights(TrainerCallback):  # type: ignore[misc]
    """One weight of the model as the first step of ``train`` finds it (after any resume)."""

    def __init__(self) -> None:
        self.weight: torch.Tensor | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if self.weight is None:
            self.weight = model.transformer.wte.weight.detach().clone()


def sft_trainer(tok: Any, run: str, steps: int, compiled: bool, seed: int) -> Any:
    """The sft worker's trainer (``train_loop_per_worker``'s choice on a CPU with the legal-move
    loss), on one block of a real opening repeated, from a 1-layer GPT-2 of ``seed``."""
    ids = [tok.bos_token_id, *tok(GAME, add_special_tokens=False)["input_ids"], tok.eos_token_id]
    ids += [tok.pad_token_id] * (LENGTH - len(ids))
    flat, counts = legal_move_targets(ids, MoveTokens(tok), tok.bos_token_id)
    block = {"input_ids": ids, "labels": ids, "legal_moves": flat, "legal_counts": counts}
    torch.manual_seed(seed)
    shape = {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": LENGTH}
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **shape))
    cfg = trl_learner.TRLLoopConfig(
        max_steps=steps,
        batch_size=2,
        learning_rate=1e-3,
        warmup_steps=0,
        eval_every=2,  # a checkpoint every 2 steps
        use_gpu=False,
        precision="fp32",
        seed=0,
        tracking_uri=None,
        tracking_run_id=None,
        scratch=f"chess-rl-test-sft-{run}",
    )
    args = trl_learner.training_arguments(
        SFTConfig,
        cfg,
        "sft",
        trl_learner.WorkerSetup(rank=0, mlflow=None, use_gpu=False, bf16=False),
        logging_steps=1,
        max_length=LENGTH,
        dataset_kwargs={"skip_prepare_dataset": True},
        torch_compile=compiled,
        **({"torch_compile_backend": "aot_eager"} if compiled else {}),
    )

    class ShardSFTTrainer(trl_learner.OwnShardLoader, own_loss_sft_trainer_class(1.0, compiled)):  # type: ignore[misc]
        """As the worker's: its own rows as they come."""

    train = trl_learner.stream_dataset(lambda: enumerate(dict(block) for _ in itertools.count()))
    return ShardSFTTrainer(model=model, args=args, train_dataset=train, processing_class=tok)


def weight_names(checkpoint: Path) -> set[str]:
    with safe_open(checkpoint / "model.safetensors", "pt") as saved:
        return set(saved.keys())


@pytest.mark.slow  # ~30 s, most of it inductor's first compile: make test, not make check
def test_a_compiled_sft_resumes_an_eager_checkpoint_and_checkpoints_the_plain_model() -> None:
    tok = build_chess_tokenizer(LENGTH)
    trainers = []
    try:
        eager = sft_trainer(tok, "eager", steps=2, compiled=False, seed=0)
        trainers.append(eager)
        eager.train()
        first = Path(eager.args.output_dir) / "checkpoint-2"
        plain = weight_names(first)
        assert plain and not any("_orig_mod" in name for name in plain)

        # compiled (a fresh model of another seed), resuming the eager checkpoint: it starts from its weights
        compiled = sft_trainer(tok, "compiled", steps=4, compiled=True, seed=1)
        trainers.append(compiled)
        seen = FirstStepWeights()
        compiled.add_callback(seen)
        compiled.train(resume_from_checkpoint=str(first))
        assert type(compiled.model_wrapped).__name__ == "OptimizedModule"  # it ran compiled
        with safe_open(first / "model.safetensors", "pt") as saved:
            assert torch.equal(seen.weight, saved.get_tensor("transformer.wte.weight"))
        logged = [h for h in compiled.state.log_history if "loss" in h]
        assert [h["step"] for h in logged] == [1, 2, 3, 4]  # the eager run's history, then its own
        logged = logged[2:]
        assert all(math.isfinite(h["loss"]) and math.isfinite(h["legal_loss"]) for h in logged)
        assert all(0.0 < h["legal_mass"] < 1.0 for h in logged)  # the compiled legal-move loss's figure
        # its checkpoint holds the plain GPT-2's weights, and an eager run resumes from it
        second = Path(compiled.args.output_dir) / "checkpoint-4"
        assert weight_names(second) == plain
        again = sft_trainer(tok, "again", steps=6, compiled=False, seed=2)
        trainers.append(again)
        seen = FirstStepWeights()
        again.add_callback(seen)
        again.train(resume_from_checkpoint=str(second))
        with safe_open(second / "model.safetensors", "pt") as saved:
            assert torch.equal(seen.weight, saved.get_tensor("transformer.wte.weight"))
        assert again.state.global_step == 6
    finally:
        for trainer in trainers:
            shutil.rmtree(trainer.args.output_dir, ignore_errors=True)
