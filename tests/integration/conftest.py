"""One embedded local Ray for the whole integration session (phases join it as 'existing'), and
an untrained tiny language model saved as a Hugging Face folder."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.config import RaySection
from cluster.runtime import RayInfo, ray_session


@pytest.fixture(autouse=True)
def _log_handlers_follow_capture() -> None:
    """Point stream handlers whose stream was closed at the current ``sys.stderr``.

    Ray's ``PlainRayHandler`` keeps the ``sys.stderr`` it saw when Ray Data first logged; under
    ``capsys`` that is one test's capture, closed when the test ends, and every later Ray Data
    line then prints a "--- Logging error ---" traceback into the next test's stderr.
    """
    loggers = [logging.root, *logging.root.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
                handler.stream = sys.stderr


@pytest.fixture(scope="session")
def local_ray() -> Iterator[RayInfo]:
    with ray_session(RaySection(num_cpus=2, object_store_gb=1)) as info:
        yield info


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> Path:
    """An untrained tiny GPT-2 and the chess tokenizer, saved with ``save_pretrained``."""
    from chessrl.lm.models import build_model

    folder = tmp_path_factory.mktemp("lm")
    model, tokenizer = build_model("tiny")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_scorer_dir(tmp_path_factory) -> Path:
    """An untrained tiny reward model (a scorer) that reads the facts format, saved as
    ``chess-rl reward`` saves one."""
    from chessrl.rl.reward import TEXT_FORMAT_KEY, build_reward_model

    folder = tmp_path_factory.mktemp("scorer")
    model, tokenizer = build_reward_model("tiny")
    setattr(model.config, TEXT_FORMAT_KEY, "facts")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _registered_checkpoints(phase: Path) -> int:
    """Checkpoints Ray Train has recorded for a phase (its snapshot file). A ``learner.pt`` on
    storage alone may be half-reported: a driver killed then resumes from the one before."""
    import json

    snapshots = list((phase / "ray").glob("*/checkpoint_manager_snapshot.json"))
    try:
        return sum(len(json.loads(p.read_text())["checkpoint_results"]) for p in snapshots)
    except (OSError, ValueError, KeyError):  # being written
        return 0


def _last_registered_step(phase: Path, key: str = "step") -> int:
    """The step (``key`` of its metrics: ``step`` for a TRL learner, ``iteration`` for a loop
    learner) of the newest checkpoint Ray Train's snapshot records for a phase (0: none): the
    oldest a killed learner may resume from (the snapshot can lag a checkpoint behind)."""
    import json

    steps = [0]
    for path in (phase / "ray").glob("*/checkpoint_manager_snapshot.json"):
        for result in json.loads(path.read_text())["checkpoint_results"]:
            steps.append(int(result["metrics"].get(key, 0)))
    return max(steps)


@pytest.fixture(scope="session")
def last_registered_step():
    """:func:`_last_registered_step`: the oldest step a killed learner may resume from."""
    return _last_registered_step


@pytest.fixture(scope="session")
def registered_checkpoints():
    """:func:`_registered_checkpoints`, for the tests that kill a driver after a checkpoint."""
    return _registered_checkpoints


class KilledRun:
    """A command run in its own session and killed with SIGKILL, its whole process group (driver,
    embedded Ray, workers), when the ``with`` block ends: what the kill -9 tests share.

        with KilledRun(command, env=env, log=tmp_path / "first.log") as run:
            run.wait_for(lambda: registered_checkpoints(phase), timeout=300)
            assert run.running, "dpo ended before the driver could be killed"
    """

    def __init__(self, command: list[str], *, env: dict[str, str], log: Path | None = None) -> None:
        self.command, self.env, self.log = command, env, log

    def __enter__(self) -> KilledRun:
        self._out = self.log.open("w") if self.log is not None else None
        self.proc = subprocess.Popen(
            self.command,
            cwd=Path(__file__).resolve().parents[2],
            env=self.env,
            start_new_session=True,
            stdout=self._out or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self._out else subprocess.DEVNULL,
        )
        self.started = time.monotonic()
        return self

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, ready: Callable[[], object], *, timeout: float, poll: float = 0.2) -> bool:
        """Poll ``ready`` until it holds, the command ends, or ``timeout`` seconds from the start."""
        while time.monotonic() < self.started + timeout and self.running:
            if ready():
                return True
            time.sleep(poll)
        return False

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self._out is not None:
            self._out.close()


@pytest.fixture(scope="session")
def killed_run() -> type[KilledRun]:
    """:class:`KilledRun`, for the tests that kill a phase mid-run and run it again."""
    return KilledRun


def _preference_pair_rows(games: list[list[str]], source: str, rng: Any) -> list[dict[str, Any]]:
    """Preference rows in the table's schema from real games: every third ply of a game's first
    40, the move played chosen over another legal move (what reward and dpo train on in their
    tests; the judging itself is test_preferences_phase's)."""
    import chess

    from chessrl.lm.formats import MovesFormat

    fmt = MovesFormat()
    rows = []
    for g, moves in enumerate(games):
        board = chess.Board()
        for ply, move in enumerate(moves[:40]):
            others = sorted(m.uci() for m in board.legal_moves if m.uci() != move)
            if others and ply % 3 == 0:
                before = moves[:ply]
                rows.append(
                    {
                        "prompt": fmt.prompt(before),
                        "chosen": fmt.completion(before, move),
                        "rejected": fmt.completion(before, rng.choice(others)),
                        "chosen_score": 0,
                        "rejected_score": -100,
                        "fen": board.fen(),
                        "source": source,
                        "game_id": f"{source}-{g}",
                        "ply": ply,
                        "phase": "opening",
                        "kind": "worse",
                    }
                )
            board.push_uci(move)
    return rows


@pytest.fixture(scope="session")
def preference_pair_rows():
    """:func:`_preference_pair_rows`, for the tests that build a preference table."""
    return _preference_pair_rows


def _random_games(folder: Path, n: int = 12, plies: int = 600) -> Path:
    """A games table of ``n`` seeded random games, long enough to reach past a tiny context."""
    import random

    import chess
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    rows = []
    for i in range(n):
        board = chess.Board()
        while not board.is_game_over() and board.ply() < plies:
            board.push(rng.choice(list(board.legal_moves)))
        rows.append(
            {
                "game_id": f"{(i * 2**60 + 2**59) % 2**64:016x}",
                "moves": " ".join(m.uci() for m in board.move_stack),
            }
        )
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), folder / "part-0.parquet")
    return folder


@pytest.fixture(scope="session")
def random_games():
    """:func:`_random_games`, a games table for the phases that read one (ppo, a grpo sweep)."""
    return _random_games
