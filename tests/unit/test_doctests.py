"""The examples in the docstrings of the Ray-free modules are true (they document calls and results)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "chessrl.pgn",
    "chessrl.games",
    "chessrl.engine",
    "chessrl.engine_games",
    "chessrl.tokenizer",
    "chessrl.formats",
    "chessrl.models",
    "chessrl.lm_data",
    "chessrl.legality",
    "chessrl.rating",
    "chessrl.players",
    "chessrl.arena",
    "chessrl.suites",
    "chessrl.uci_server",
    "chessrl.board_encoding",
    "chessrl.network",
    "chessrl.mcts",
    "chessrl.mcts_tree",
    "chessrl.mcts_native",
    "chessrl.mcts_compiled",
    "chessrl.compiled",
    "chessrl.native_board",
    "chessrl.search_board",
    "chessrl.preferences",
    "chessrl.reward",
    "chessrl.ppo",
    "chessrl.positions",
    "chessrl.grpo",
    "chessrl.batch_size",
    "chessrl.lm_data",
    "pipelines.ppo",
    "cluster.errors",
    "cluster.tracking",
    "cluster.config",
    "cluster.runtime",
    "cluster.graph",
    "pipelines.config",
    "pipelines.tune",
    "chessrl.eval_report",
    "cluster.progress",
    "pipelines.matches",
    "pipelines.learner",
    "chessrl.dpo",
    "chessrl.masked",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    report = capsys.readouterr().out
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, report
