"""TRL's side of the GRPO bench (``bench/grpo_step.py``, run as ``rl_step.py --algo grpo``):
``trl.GRPOTrainer`` in this process on the policy as TRL loads it, the phase's prompts and
rewards (the policy task's move scored by ONE python-chess ``SimpleEngine``), timed a step at a
time. :func:`baseline_run` is the whole side; the rest are its parts:

    b = baseline_run(policy, cfg, prompts, limits, iterations, seed, threads, work)
    b["samples_per_s"], b["generate_s"], b["score_s"], b["learn_s"]   # steps 2..N+1
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

STOCKFISH = "/usr/games/stockfish"
#: The phase's engine options (``chessrl.engine.client.UCIEngine``: one thread, 16 MB hash, WDL scores).
ENGINE_OPTIONS = {"Threads": 1, "Hash": 16, "UCI_ShowWDL": True}


def expected_scorer(engine: Any, nodes: int) -> Any:
    """``expected(board)``: the side to move's expected score (win + draw / 2) from ``engine`` at
    ``nodes``, as the phase's EnginePool answers (a finished game: 0 mated, 0.5 drawn)."""
    import chess.engine

    from chessrl.engine.client import Score

    limit = chess.engine.Limit(nodes=nodes)

    def expected(board: Any) -> float:
        outcome = board.outcome(claim_draw=False)
        if outcome is not None:
            return 0.0 if outcome.winner is not None else 0.5
        info = engine.analyse(board, limit)
        return Score.from_pov(info["score"], info.get("wdl"), board.turn).expected

    return expected


def reward_function(engine: Any, cfg: Any, stats: dict[str, float]) -> Any:
    """A TRL reward function (``prompts``, ``completions``, the dataset's columns as lists):
    the phase's rewards (:func:`chessrl.rl.grpo.score_samples`), Stockfish through ``engine``."""
    import chess

    from chessrl.rl.grpo import env_reward, parse_policy_completion, policy_reward
    from pipelines.grpo import grpo_settings

    settings = grpo_settings(cfg)
    expected = expected_scorer(engine, cfg.stockfish_nodes)

    def chess_reward(
        prompts: list[str],
        completions: list[str],
        task: list[str],
        fen: list[str],
        target: list[str],
        completion_ids: list[list[int]] | None = None,
        **_: Any,
    ) -> list[float]:
        started = time.perf_counter()
        seen: dict[str, float] = {}  # one analysis per position a call (the phase's batch dedups too)

        def value(board: Any) -> float:
            key = board.fen()
            if key not in seen:
                seen[key] = expected(board)
            return seen[key]

        out = []
        for text, kind, position, answer in zip(completions, task, fen, target, strict=True):
            if kind == "environment":
                out.append(env_reward(text, answer, settings.env_weights).reward)
                continue
            status, move = parse_policy_completion(position, text)
            if move is None:
                out.append(policy_reward(status, best=None, move=None, settings=settings))
                continue
            board = chess.Board(position)
            best = value(board)
            board.push_uci(move)
            out.append(policy_reward(status, best=best, move=1.0 - value(board), settings=settings))
            stats["legal"] += 1
        stats["score_s"] += time.perf_counter() - started
        stats["analysed"] += len(seen)
        stats["completions"] += len(completions)
        stats["policy"] += sum(k == "policy" for k in task)
        if completion_ids is not None:
            stats["tokens"] += sum(len(c) for c in completion_ids)
        return out

    return chess_reward


def trl_args(
    cfg: Any, limits: dict[str, int], iterations: int, seed: int, output: Path, tasks: set[str] | None = None
) -> Any:
    """TRL's GRPOConfig for one optimizer step per ``prompts_per_iteration × group_size``
    completions. In TRL ``per_device_train_batch_size`` counts completions (not prompts), and the
    generation batch defaults to ``per_device_train_batch_size × gradient_accumulation_steps``
    completions: one generation (and one reward call) per optimizer step. Its one completion limit
    is the longest of the ``tasks`` the prompts ask (default: every task's)."""
    from trl import GRPOConfig as TRLGRPOConfig

    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # checkpointing renamed
    per_step = cfg.prompts_per_iteration * cfg.group_size
    micro = min(per_step, cfg.batch_size if isinstance(cfg.batch_size, int) else 64)
    while per_step % micro:  # the largest micro-batch <= batch_size that divides the step
        micro -= 1
    loss, scale, high = {
        "grpo": ("grpo", "group", None),
        "dr_grpo": ("dr_grpo", "none", None),
        "dapo": ("dapo", "group", cfg.clip_high),  # TRL's dapo has no dynamic sampling
    }[cfg.loss_type]
    return TRLGRPOConfig(
        output_dir=str(output),
        max_steps=iterations + 1,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_step // micro,
        num_generations=cfg.group_size,
        max_completion_length=max(limits[t] for t in (tasks or limits)),
        temperature=cfg.temperature,
        top_p=1.0,
        top_k=0,
        beta=cfg.beta,
        epsilon=cfg.clip,
        epsilon_high=high,
        loss_type=loss,
        scale_rewards=scale,
        num_iterations=1,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        # TRL's defaults that differ from the phase: gradient checkpointing and bf16 on, the
        # dataset shuffled; the phase trains in fp32 without checkpointing, prompts in plan order.
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        shuffle_dataset=False,
        disable_dropout=True,
        use_vllm=False,
        remove_unused_columns=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        log_completions=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
    )


def load_trl_policy(policy_path: str, prompts: list[dict[str, Any]], cfg: Any) -> tuple[Any, Any]:
    """The policy and tokenizer as TRL's side loads them (``AutoModelForCausalLM`` in fp32,
    ``AutoTokenizer``), after checking that TRL encodes the first step's prompts as the phase does."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from chessrl.lm.models import prompt_ids

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(policy_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # TRL encodes a prompt with ``tokenizer(text)`` and pads it itself (on the left for generate,
    # whatever the tokenizer's padding side). A saved chess tokenizer puts the start token (BOS)
    # first and drops trailing whitespace by itself (chessrl.lm.tokenizer.add_prompt_start), so TRL's
    # prompt ids are the phase's (chessrl.lm.models.prompt_ids): checked here, not assumed.
    for p in prompts[: cfg.prompts_per_iteration]:
        if tokenizer(p["text"])["input_ids"] != prompt_ids(tokenizer, p["text"]):
            raise SystemExit(
                f"rl_step --algo grpo: {policy_path}'s tokenizer encodes {p['text']!r} without the start "
                "token the phase puts first; TRL would see other prompts than the phase"
            )
    return model, tokenizer


def step_timer(threads: int, stats: dict[str, float]) -> Any:
    """A TrainerCallback with the timestamps of each optimizer step's start and end (generation,
    rewards, loss, step) and ``stats``' scoring and generation seconds at each end; it gives
    torch ``threads`` threads when training begins."""
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Timestamps of each optimizer step's start and end (generation, rewards, loss, step)."""

        def __init__(self) -> None:
            self.begin: list[float] = []
            self.end: list[float] = []
            self.score_at_end: list[float] = []
            self.generate_at_end: list[float] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            torch.set_num_threads(threads)  # whatever accelerate set up, the baseline gets `threads`

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begin.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.end.append(time.perf_counter())
            self.score_at_end.append(stats["score_s"])
            self.generate_at_end.append(stats["generate_s"])

    return StepTimer()


def time_generation(trainer: Any, stats: dict[str, float]) -> None:
    """Adds the seconds of TRL's generation to ``stats["generate_s"]``: its private
    ``_generate_single_turn`` wrapped when it is there, for the breakdown only."""
    generate = getattr(trainer, "_generate_single_turn", None)
    if generate is None:
        return

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            stats["generate_s"] += time.perf_counter() - t0

    trainer._generate_single_turn = timed_generate


def baseline_run(
    policy_path: str,
    cfg: Any,
    prompts: list[dict[str, Any]],
    limits: dict[str, int],
    iterations: int,
    seed: int,
    threads: int,
    work: Path,
) -> dict[str, Any]:
    """``iterations`` + 1 steps of TRL's GRPOTrainer in this process; samples/s of all but the first."""
    import chess.engine
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    torch.set_num_threads(threads)
    model, tokenizer = load_trl_policy(policy_path, prompts, cfg)
    rows = prompts[: (iterations + 1) * cfg.prompts_per_iteration]
    dataset = Dataset.from_list(
        [{"prompt": p["text"], "task": p["task"], "fen": p["fen"], "target": p["target"] or ""} for p in rows]
    )
    stats: dict[str, float] = dict.fromkeys(
        ("score_s", "generate_s", "analysed", "completions", "policy", "legal", "tokens"), 0.0
    )
    timer = step_timer(threads, stats)
    engine = chess.engine.SimpleEngine.popen_uci(STOCKFISH)
    try:
        engine.configure({k: v for k, v in ENGINE_OPTIONS.items() if k in engine.options})
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_function(engine, cfg, stats),
            args=trl_args(cfg, limits, iterations, seed, work / "trl", {p["task"] for p in rows}),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.remove_callback(PrinterCallback)  # the end-of-training metrics dict, printed
        if getattr(trainer.model, "is_gradient_checkpointing", False):
            raise SystemExit("rl_step --algo grpo: TRL turned gradient checkpointing on; the phase has none")
        time_generation(trainer, stats)
        trainer.train()
    finally:
        engine.quit()
    steps = len(timer.end) - 1
    if steps < 1:
        raise SystemExit(
            f"rl_step --algo grpo: TRL ran {len(timer.end)} step(s); {iterations + 1} were asked"
        )
    samples = steps * cfg.prompts_per_iteration * cfg.group_size
    seconds = timer.end[-1] - timer.end[0]
    score_s = timer.score_at_end[-1] - timer.score_at_end[0]
    generate_s = timer.generate_at_end[-1] - timer.generate_at_end[0]
    return {
        "samples_per_s": samples / seconds,
        "samples": samples,
        "steps": steps,
        "seconds": seconds,
        "step_s": sum(e - b for b, e in zip(timer.begin[1:], timer.end[1:], strict=True)),
        "generate_s": generate_s,
        "score_s": score_s,
        "learn_s": seconds - generate_s - score_s,
        "completions_scored": int(stats["completions"]),
        "positions_analysed": int(stats["analysed"]),
        "legal_rate": stats["legal"] / max(1.0, stats["policy"]),
        "completion_tokens_mean": stats["tokens"] / max(1.0, stats["completions"]),
        "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
        "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
        "generation_batch_size": trainer.args.generation_batch_size,
    }
