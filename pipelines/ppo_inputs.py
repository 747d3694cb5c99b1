"""``ppo``'s inputs, checked before Ray starts (the phase's ``Phase.check``): the opponents, the
policy and the reward model (load-free: GPT-2-style, one tokenizer, a token per move, a context
long enough for an episode), the format the policy is asked in, and the games table the
episodes start from. :mod:`pipelines.ppo` runs on what they find (and re-exports these names).

    found = check_ppo(config, Inputs(run_storage, frozenset()))   # a ConfigError says what is wrong
    found.policy, found.reward, found.text_format                  # ("runs/a/sft/model", "", "moves")
    check_models("runs/a/sft/model", None, max_tokens=40)["context"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster.errors import ConfigError
from cluster.storage import Storage
from pipelines.common.artifacts import sft_folder
from pipelines.common.phase import Inputs, gpt2_config, model_location
from pipelines.config import ChessRLConfig, PPOConfig


def check_models(
    policy_path: str, reward_path: str | None, max_tokens: int, text_format: str = "moves"
) -> dict[str, Any]:
    """Load-free checks of the policy and the reward model (None: Stockfish scores the moves):
    both GPT-2-style, one tokenizer, a token per move, a context long enough for an episode
    (``max_tokens`` in the moves format; a position format's longest prompt and a move).
    Returns facts for the log, and ``moves_context``: the shortest context of a model that reads
    the game's moves (None when none does)."""
    from chessrl.lm.checkpoints import load_tokenizer
    from chessrl.lm.legality import MoveTokens
    from chessrl.lm.models import prompt_ids

    configs = {
        "ppo.policy (--policy)": gpt2_config(
            policy_path,
            "ppo.policy (--policy)",
            "GPT2LMHeadModel",
            "ppo needs a GPT-2-style language model (GPT2LMHeadModel), e.g. this run's sft model",
        )
    }
    if reward_path is not None:
        configs["ppo.reward_model (--reward-model)"] = gpt2_config(
            reward_path,
            "ppo.reward_model (--reward-model)",
            "GPT2ForSequenceClassification",
            "ppo needs a reward model (GPT2ForSequenceClassification): train one with `chess-rl reward`, "
            "or score the moves with Stockfish (--reward stockfish)",
        )
    policy_tok = load_tokenizer(policy_path)
    reward_tok = load_tokenizer(reward_path) if reward_path is not None else policy_tok
    if policy_tok.get_vocab() != reward_tok.get_vocab():
        raise ConfigError(
            f"ppo.reward_model (--reward-model): its tokenizer ({len(reward_tok)} tokens) is not the policy's "
            f"({len(policy_tok)} tokens, {policy_path}): the reward model must be trained on the policy's tokenizer"
        )
    try:
        MoveTokens(policy_tok)
    except ValueError as exc:
        raise ConfigError(f"ppo.policy (--policy): {exc}") from None
    context = int(configs["ppo.policy (--policy)"].get("n_positions", 1024))
    readers = [context] if text_format == "moves" else []  # the contexts that read the game's moves
    if reward_path is not None:
        from chessrl.rl.reward import reward_format

        judge = configs["ppo.reward_model (--reward-model)"]
        judge_context = int(judge.get("n_positions", 1024))
        # the judge reads the game's moves in its own format, and as the critic the policy's prompts
        readers += [judge_context] if "moves" in (reward_format(judge).name, text_format) else []
        if reward_format(judge).name == "moves" and max_tokens > judge_context:
            raise ConfigError(
                f"ppo.max_start_ply + 2 x ppo.max_actions needs {max_tokens} tokens, more than the reward model's "
                f"context ({judge_context}; it reads the game's moves): lower --max-start-ply or --max-actions"
            )
    if text_format != "moves":
        import chess

        from chessrl.lm.formats import get_format

        longest = chess.Board("r3k2r/8/8/8/4Pp2/8/8/R3K2R b KQkq e3 0 1")  # every castling right, en passant
        needed = len(prompt_ids(policy_tok, get_format(text_format).prompt_for(longest, []))) + 2
        if needed > context:
            raise ConfigError(
                f"ppo.text_format (--text-format) {text_format}: a position's prompt needs {needed} tokens, more than "
                f"the policy's context ({context})"
            )
    elif max_tokens > context:
        raise ConfigError(
            f"ppo.max_start_ply + 2 x ppo.max_actions needs {max_tokens} tokens, more than the policy's context "
            f"({context}): lower --max-start-ply or --max-actions"
        )
    return {"context": context, "vocab": len(policy_tok), "moves_context": min(readers, default=None)}


@dataclass(frozen=True)
class PPOInputs:
    """What ``ppo`` reads, checked: its opponents, the policy and the reward model ("" when
    Stockfish scores the moves), and what :func:`check_models` found (None while an earlier phase
    of the graph run still has to write one of the models)."""

    opponents: list[Any]
    policy: str
    reward: str
    facts: dict[str, Any] | None
    text_format: str = "moves"
    """What the policy reads: the section's ``text_format``, else the policy's own."""


def asked_text_format(cfg: PPOConfig, policy_path: str) -> str:
    """The format ppo asks a saved policy in: ``ppo.text_format``, else the one it was trained on
    (``chessrl_text_format``), else moves; a format ppo does not play, or another of sft's own
    formats than the policy's, is one ConfigError."""
    from pipelines.common.artifacts import check_asked_format, recorded_text_format

    trained = recorded_text_format(policy_path)
    text_format = cfg.text_format or trained or "moves"
    if text_format not in ("moves", "board", "facts"):
        raise ConfigError(
            f"ppo.policy (--policy): {policy_path} was trained on the {text_format} format; ppo plays the moves, "
            "board and facts formats: pass --text-format moves, board or facts to ask it in one of them"
        )
    check_asked_format("ppo.text_format (--text-format)", text_format, policy_path, trained)
    return text_format


def check_ppo(config: ChessRLConfig, inputs: Inputs) -> PPOInputs:
    """Every input of ``ppo``, before Ray starts: the opponents, the policy and the reward model
    (saved folders; then :func:`check_models` on both) and the games table the episodes start
    from (when given, or when one is there), each unless an earlier phase of the same graph run
    writes it."""
    from chessrl.rl.ppo import parse_opponent
    from pipelines.common.artifacts import games_table

    cfg = config.ppo
    opponents = [parse_opponent(o) for o in cfg.opponents]  # the section's own rules are its validators
    producer = sft_folder(cfg.text_format or "moves")  # a board ppo starts from the board sft
    policy_path = model_location(
        cfg.policy,
        inputs.folder(producer).child("model"),
        "ppo.policy (--policy)",
        f"sft --text-format {cfg.text_format}" if producer != "sft" else "sft",
        produced=inputs.will_write(producer),
    )
    stockfish = cfg.reward == "stockfish"
    if stockfish:
        from chessrl.engine.client import find_stockfish

        find_stockfish()  # the engines that grade the moves
        reward_path = ""
    else:
        reward_path = model_location(
            cfg.reward_model,
            inputs.folder("reward").child("model"),
            "ppo.reward_model (--reward-model)",
            "reward",
            produced=inputs.will_write("reward"),
        )
    facts = None
    text_format = cfg.text_format or "moves"
    if cfg.policy or not inputs.will_write(producer):  # the policy is there: its recorded format decides
        text_format = asked_text_format(cfg, policy_path)
    if (cfg.policy or not inputs.will_write(producer)) and (
        stockfish or cfg.reward_model or not inputs.will_write("reward")
    ):
        facts = check_models(
            policy_path, reward_path or None, cfg.max_start_ply + 2 * cfg.max_actions + 2, text_format
        )
    source = Storage.from_uri(cfg.games or inputs.folder("prepare").uri_of("games"))
    if cfg.games or (not inputs.will_write("prepare") and source.exists()):
        games_table(source)
    elif cfg.table_positions > 0 and not inputs.will_write("prepare"):
        raise ConfigError(
            f"ppo.table_positions (--table-positions) is {cfg.table_positions:g}, but there is no games table at "
            f"{source.uri} to take the positions from: run `chess-rl prepare` first, pass --games DIR|s3://..., "
            "or set it to 0"
        )
    if cfg.quality_nodes > 0 and cfg.heldout_positions > 0:
        from chessrl.engine.client import find_stockfish

        find_stockfish()  # the paired move quality at the end needs it: said before any work
    return PPOInputs(opponents, policy_path, reward_path, facts, text_format)
