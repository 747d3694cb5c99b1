"""Where Stockfish is looked for, and what a user is told when it is not there."""

from __future__ import annotations

import os
import stat

import pytest

from chessrl.engine import client as engine
from chessrl.engine.client import EngineNotFoundError, SearchLimit, Strength, find_stockfish


def fake_binary(path) -> str:
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_stockfish_path_wins(tmp_path, monkeypatch):
    binary = fake_binary(tmp_path / "sf")
    monkeypatch.setenv("STOCKFISH_PATH", binary)
    assert find_stockfish() == binary


def test_explicit_path_beats_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("STOCKFISH_PATH", fake_binary(tmp_path / "a"))
    assert find_stockfish(fake_binary(tmp_path / "b")) == str(tmp_path / "b")


def test_then_path_then_debian(tmp_path, monkeypatch):
    monkeypatch.delenv("STOCKFISH_PATH", raising=False)
    fake_binary(tmp_path / "stockfish")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_stockfish() == str(tmp_path / "stockfish")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(engine, "DEBIAN_STOCKFISH", fake_binary(tmp_path / "debian-sf"))
    assert find_stockfish() == str(tmp_path / "debian-sf")


def test_missing_engine_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.delenv("STOCKFISH_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(engine, "DEBIAN_STOCKFISH", str(tmp_path / "nothing"))
    with pytest.raises(EngineNotFoundError) as info:
        find_stockfish()
    assert "apt-get install stockfish" in str(info.value) and "STOCKFISH_PATH" in str(info.value)


def test_a_stockfish_path_that_is_not_executable_is_named(tmp_path, monkeypatch):
    (tmp_path / "sf.txt").write_text("not a program")
    os.chmod(tmp_path / "sf.txt", 0o644)
    monkeypatch.setenv("STOCKFISH_PATH", str(tmp_path / "sf.txt"))
    with pytest.raises(EngineNotFoundError, match="STOCKFISH_PATH=.*sf.txt.* is not an executable file"):
        find_stockfish()


def test_limits_and_strengths_are_validated():
    with pytest.raises(ValueError, match="nodes, depth or time"):
        SearchLimit()
    with pytest.raises(ValueError, match="nodes must be > 0"):
        SearchLimit(nodes=0)
    with pytest.raises(ValueError, match="1320..3190"):
        Strength(elo=1000)
    with pytest.raises(ValueError, match="0..20"):
        Strength(skill_level=25)
    assert Strength(elo=1500).options() == {"UCI_LimitStrength": True, "UCI_Elo": 1500}
    assert SearchLimit(nodes=200_000).deadline_s(10.0) == pytest.approx(12.0)
