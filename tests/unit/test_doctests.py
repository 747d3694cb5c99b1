"""The examples in the docstrings of the Ray-free modules are true (they document calls and results)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "chessrl.data.pgn",
    "chessrl.data.pgn_filters",
    "chessrl.data.games",
    "chessrl.engine.client",
    "chessrl.engine.move_value",
    "chessrl.engine.engine_games",
    "chessrl.lm.tokenizer",
    "chessrl.lm.formats",
    "chessrl.lm.models",
    "chessrl.lm.checkpoints",
    "chessrl.lm.gelu",
    "chessrl.lm.lm_data",
    "chessrl.lm.legality",
    "chessrl.lm.lm_eval",
    "chessrl.lm.shared_prefix",
    "chessrl.arena.rating",
    "chessrl.arena.sprt",
    "chessrl.arena.ladder",
    "chessrl.arena.players",
    "chessrl.arena.game",
    "chessrl.arena.suites",
    "chessrl.engine.uci_server",
    "chessrl.search.board_encoding",
    "chessrl.search.move_codes",
    "chessrl.search.compiled_bitboards",
    "chessrl.search.network",
    "chessrl.search.net_config",
    "chessrl.search.mcts",
    "chessrl.search.mcts_node",
    "chessrl.rl.ppo_learner",
    "chessrl.rl.ppo_forward",
    "chessrl.rl.grpo_loss",
    "chessrl.rl.own_games",
    "chessrl.search.mcts_tree",
    "chessrl.search.mcts_native",
    "chessrl.search.mcts_compiled",
    "chessrl.search.compiled",
    "chessrl.search.native_board",
    "chessrl.search.search_board",
    "chessrl.rl.preferences",
    "chessrl.rl.reward",
    "chessrl.rl.scorer_policy",
    "chessrl.rl.grpo_scorer",
    "chessrl.rl.judge_player",
    "chessrl.rl.ppo",
    "chessrl.data.positions",
    "chessrl.rl.grpo",
    "chessrl.lm.batch_size",
    "chessrl.lm.lm_data",
    "pipelines.ppo",
    "cluster.errors",
    "cluster.tracking",
    "cluster.config",
    "cluster.runtime",
    "cluster.graph",
    "pipelines.config",
    "pipelines.tune",
    "chessrl.arena.eval_report",
    "chessrl.arena.paired_report",
    "chessrl.arena.move_quality",
    "chessrl.arena.saved_models",
    "cluster.progress",
    "pipelines.evaluate_matches",
    "pipelines.learner",
    "pipelines.learner.loop",
    "pipelines.learner.trl",
    "pipelines.learner.trl_driver",
    "pipelines.learner.replay",
    "pipelines.common.artifacts",
    "pipelines.selfplay_gate",
    "pipelines.selfplay",
    "chessrl.search.replay",
    "chessrl.rl.dpo",
    "chessrl.lm.masked",
    "pipelines.common.phase",
    "pipelines.common.config_record",
    "pipelines.evaluate_opponents",
    "pipelines.evaluate_openings",
    "pipelines.sft_data",
    "chessrl.engine.annotation",
    "pipelines.annotate",
    "actors.engine_pool",
    "actors.rollout",
    "chessrl.rl.ppo_types",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    report = capsys.readouterr().out
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, report
