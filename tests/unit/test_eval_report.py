"""chessrl.eval_report.comparison_lines: the head-to-head table rlaif ends with."""

from __future__ import annotations

import re

from chessrl.arena import ArenaGame
from chessrl.eval_report import comparison_lines


def game(white: str, black: str, result: str) -> ArenaGame:
    return ArenaGame(white=white, black=black, result=result, termination="max_plies", moves=[],
                     first_attempt_legal={"white": 3, "black": 1}, player_moves={"white": 4, "black": 4})  # fmt: skip


def test_ten_draws_give_an_interval_of_non_zero_width_around_zero() -> None:
    games = [game("lm:p", "random", "1/2-1/2"), game("random", "lm:p", "1/2-1/2")] * 5
    lines = comparison_lines(games, ["lm:p", "random"], {"lm:p": "ppo"})
    ppo = next(line for line in lines if line.startswith("ppo "))
    low, high = map(int, re.search(r"\(([-+]\d+) \.\. ([-+]\d+)\)", ppo).groups())
    assert low < 0 < high and "+0 (" in ppo
    assert "ppo            -          +0 =10 -0" in lines


def test_scores_legal_rates_and_the_pairing_matrix_from_each_side() -> None:
    games = [game("lm:p", "sft", "1-0"), game("sft", "lm:p", "1-0"), game("lm:p", "random", "0-1")]
    lines = comparison_lines(games, ["lm:p", "sft", "random"], {"lm:p": "ppo"})
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["ppo"][1:4] == ["3", "33.3%", "58.3%"]  # (3 + 1 + 3) / 12 moves legal at once
    assert rows["sft"][1:4] == ["2", "50.0%", "50.0%"]
    assert rows["random"][1:4] == ["1", "100.0%", "-"]
    assert rows["random"][4:] == ["+0", "(anchor)"]
    matrix = {line.split()[0]: line for line in lines[6:]}
    assert "+1 =0 -1" in matrix["ppo"] and "+0 =0 -1" in matrix["ppo"] and "+1 =0 -0" in matrix["random"]


def test_without_the_anchor_among_the_players_there_is_no_elo() -> None:
    lines = comparison_lines([game("lm:a", "lm:b", "1-0")], ["lm:a", "lm:b"], {})
    assert all(line.rstrip().endswith("-") for line in lines[1:3])
