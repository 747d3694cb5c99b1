"""preferences on the local Ray with real Stockfish and a tiny policy: the pairs are what they
claim (chosen = Stockfish's best at the stated limit, rejected at least the margin worse or no
legal move, held-out games never in the training pairs); a Stockfish process killed mid-batch and
a driver killed with SIGKILL lose nothing and add nothing; bad input is one clear message."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import chess
import chess.engine
import pyarrow.parquet as pq
import pytest

from chessrl.engine.client import find_stockfish
from chessrl.lm.lm_data import split_games
from chessrl.rl.preferences import PREFERENCE_SCHEMA
from pipelines import preferences, prepare
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NODES = 500


@pytest.fixture(scope="module")
def games(tmp_path_factory, local_ray, pgn_dir) -> Path:
    root = tmp_path_factory.mktemp("pref-games")
    code = prepare.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(root),
            "--run-name",
            "g",
            "--no-tracking",
            "--generate",
            "0",
            "--inputs",
            str(pgn_dir / "masters" / "Firouzja.pgn.zst"),
        ]
    )
    assert code == EXIT_OK
    return root / "g" / "prepare" / "games"


@pytest.fixture(scope="module")
def policy(tmp_path_factory, games) -> Path:
    """A tiny GPT-2 trained for 40 plain PyTorch steps on the games: it proposes legal moves some
    of the time (an untrained one almost never does), so "worse" pairs exist (14 of the first
    test's 447 pairs; 24 of 454 after 80 steps, which took ~10 s more)."""
    import pyarrow.dataset as pads

    from chessrl.lm.models import quick_policy

    texts = [
        r["moves"] for r in pads.dataset(str(games), format="parquet").to_table(columns=["moves"]).to_pylist()
    ]
    model, tok = quick_policy(texts, steps=40)
    folder = tmp_path_factory.mktemp("policy")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def pref_args(storage: Path, games: Path, policy: Path, *extra: str) -> list[str]:
    return [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "p",
        "--no-tracking",
        "--games",
        str(games),
        "--policy",
        str(policy),
        "--positions",
        "40",
        "--heldout-positions",
        "10",
        "--k",
        "8",
        "--nodes",
        str(NODES),
        "--shard-positions",
        "8",
        "--max-invalid-share",
        "1",
        *extra,
    ]


def read_pairs(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for shard in sorted(folder.glob("*/shard-*.parquet")):
        table = pq.read_table(shard)
        assert table.schema.equals(PREFERENCE_SCHEMA)
        out.setdefault(shard.parent.name, []).extend(table.to_pylist())
    return out


def kill_one_engine_when(ready: Callable[[], bool], killed: list[int]) -> threading.Thread:
    """Kill one Stockfish process of this test's own EnginePool actor with SIGKILL once
    ``ready()`` holds (mid-run): a child of a ``ray::EnginePool`` worker of the Ray this test
    process started (the session's local Ray), not whichever Stockfish on the machine started last."""
    import psutil

    def pool_engines() -> list[psutil.Process]:
        found = []
        for proc in psutil.Process(os.getpid()).children(recursive=True):
            try:
                if "stockfish" in proc.name() and proc.parent().cmdline()[0].startswith("ray::EnginePool"):
                    found.append(proc)
            except (psutil.Error, IndexError):  # gone meanwhile
                continue
        return found

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not ready():
            time.sleep(0.05)
        engines = pool_engines()
        if engines:
            engines[-1].send_signal(signal.SIGKILL)
            killed.append(engines[-1].pid)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_pairs_are_what_they_claim_and_an_engine_killed_mid_batch_loses_nothing(
    tmp_path, games, policy, capsys
):
    folder = tmp_path / "p" / "preferences"
    killed: list[int] = []
    watcher = kill_one_engine_when(lambda: len(list(folder.glob("train/*.parquet"))) >= 1, killed)
    assert preferences.main(pref_args(tmp_path, games, policy)) == EXIT_OK
    watcher.join()
    assert killed, "no Stockfish process was found to kill"
    out = capsys.readouterr().out
    assert "preferences summary" in out
    pairs = read_pairs(folder)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["engine_restarts"] >= 1
    # every shard is there: 40 training positions in shards of 8, 10 held-out ones
    assert len(list(folder.glob("train/*.parquet"))) == 5 and len(list(folder.glob("heldout/*.parquet"))) == 2
    assert summary["pairs"] == {"train": len(pairs["train"]), "heldout": len(pairs["heldout"])}
    kinds = {r["kind"] for rows in pairs.values() for r in rows}
    assert "worse" in kinds and kinds <= {"worse", "ranked", "random", "illegal", "unparseable"}

    # held-out games never in the training pairs (sft's split of the same table)
    import pyarrow.dataset as pads

    rows = pads.dataset(str(games), format="parquet").to_table(columns=["game_id", "moves"]).to_pylist()
    _, held, _ = split_games(rows, 0.05)
    held_ids = {r["game_id"] for r in held}
    assert not held_ids & {r["game_id"] for r in pairs["train"]}
    assert {r["game_id"] for r in pairs["heldout"]} <= held_ids
    assert all(r["source"] == source for source, rs in pairs.items() for r in rs)

    engine = chess.engine.SimpleEngine.popen_uci(find_stockfish())
    try:
        engine.configure({"Threads": 1, "Hash": 16})
        best: dict[str, str] = {}
        for rs in pairs.values():
            keys = set()
            for r in rs:
                assert (r["fen"], r["chosen"], r["rejected"]) not in keys  # no pair twice
                keys.add((r["fen"], r["chosen"], r["rejected"]))
                board = chess.Board(r["fen"])
                moves = r["prompt"].split()
                replay = chess.Board()
                for uci in moves:
                    replay.push_uci(uci)
                assert replay.fen() == r["fen"] and r["ply"] == len(moves)
                chosen = r["chosen"].strip()
                assert chess.Move.from_uci(chosen) in board.legal_moves
                if r["fen"] not in best:  # Stockfish's move at the stated limit, from an empty hash
                    result = engine.play(board, chess.engine.Limit(nodes=NODES), game=object())
                    best[r["fen"]] = result.move.uci()
                # chosen: Stockfish's move, or (a ranked pair) the better of two legal proposals
                assert (chosen == best[r["fen"]]) == (r["kind"] != "ranked")
                assert r["rejected_score"] <= r["chosen_score"] - 50
                word = r["rejected"].strip()
                try:
                    legal = chess.Move.from_uci(word) in board.legal_moves
                except ValueError:  # not even a UCI move
                    legal = False
                assert (r["kind"] in ("worse", "ranked", "random")) == legal
    finally:
        engine.quit()


@pytest.mark.slow
def test_a_driver_killed_mid_run_resumes_with_no_duplicate_and_no_missing_pair(
    tmp_path, games, policy, killed_run
):
    # the uninterrupted run: the reference
    assert preferences.main(pref_args(tmp_path / "clean", games, policy)) == EXIT_OK
    reference = read_pairs(tmp_path / "clean" / "p" / "preferences")

    storage = tmp_path / "killed"
    folder = storage / "p" / "preferences"
    command = [
        sys.executable,
        "-m",
        "pipelines.preferences",
        *pref_args(storage, games, policy),
        "--set",
        "ray.num_cpus=2",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    with killed_run(command, env=env) as run:
        run.wait_for(lambda: len(list(folder.glob("train/*.parquet"))) >= 2, timeout=300, poll=0.05)
        assert run.running, "the run ended before it could be killed"
    written = len(list(folder.glob("*/*.parquet")))
    assert 2 <= written < 7
    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"({written} already written, {7 - written} to make)" in rerun.stdout + rerun.stderr
    assert read_pairs(folder) == reference  # the same pairs, none twice, none missing


@pytest.fixture(scope="module")
def judge(tmp_path_factory) -> Path:
    """An untrained tiny facts-format judge whose normalisation spreads its scores over a few units
    (std: that of its own raw scores), so the margin separates moves."""
    import torch

    from chessrl.lm.formats import FactsFormat
    from chessrl.rl.reward import build_reward_model

    model, tok = build_reward_model("tiny")
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")
    texts = [FactsFormat().judged_text(board, m.uci()) + tok.eos_token for m in board.legal_moves]
    with torch.no_grad():
        raw = [float(model(**tok(t, return_tensors="pt")).logits[0, 0]) for t in texts]
    model.config.chessrl_text_format = "facts"
    model.config.chessrl_reward_mean = sum(raw) / len(raw)
    model.config.chessrl_reward_std = float(torch.tensor(raw).std())
    folder = tmp_path_factory.mktemp("judge")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_trained_judge_ranks_in_stockfish_place(tmp_path, games, policy, judge, capsys, driver_err):
    """``--judge model``: the chosen move is the judge's best of every legal move, as
    ``transformers`` alone scores the judge's text; each score is the normalised score x 100."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from chessrl.lm.formats import FactsFormat

    extra = ["--positions", "8", "--heldout-positions", "2", "--k", "3", "--judge", "model"]
    code = preferences.main(pref_args(tmp_path, games, policy, *extra, "--reward-model", str(judge)))
    out = capsys.readouterr()
    assert code == EXIT_OK, out.err[-3000:]
    folder = tmp_path / "p" / "preferences"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["judge"] == "model" and summary["reward_model"] == str(judge)
    assert "judge gap" in out.out and "Stockfish at" not in out.out
    pairs = [r for rows in read_pairs(folder).values() for r in rows]
    assert pairs and {r["kind"] for r in pairs} & {"worse", "ranked", "random"}
    model = AutoModelForSequenceClassification.from_pretrained(judge).eval()
    tok = AutoTokenizer.from_pretrained(judge)
    mean, std = model.config.chessrl_reward_mean, model.config.chessrl_reward_std

    def judged(board: chess.Board, move: str) -> float:  # the judge's text, then EOS: as it was trained
        ids = tok(FactsFormat().judged_text(board, move) + tok.eos_token, return_tensors="pt")
        with torch.no_grad():
            return (float(model(**ids).logits[0, 0]) - mean) / std

    scores: dict[str, dict[str, float]] = {}
    for r in pairs:
        board = chess.Board(r["fen"])
        if r["fen"] not in scores:
            scores[r["fen"]] = {m.uci(): judged(board, m.uci()) for m in board.legal_moves}
        mine = scores[r["fen"]]
        chosen, rejected = r["chosen"].strip(), r["rejected"].strip()
        assert abs(100 * mine[chosen] - r["chosen_score"]) <= 2
        if r["kind"] != "ranked":  # the judge's best of all the legal moves
            assert mine[chosen] >= max(mine.values()) - 0.02, (r, mine)
        assert r["rejected_score"] <= r["chosen_score"] - 50  # the default margin, 0.5 x 100
        if r["kind"] in ("worse", "ranked", "random"):
            assert abs(100 * mine[rejected] - r["rejected_score"]) <= 2
        else:
            assert rejected not in mine

    # the same folder resumed by Stockfish would mix score units: one line, nothing touched
    before = {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()}
    code = preferences.main(pref_args(tmp_path, games, policy, *extra[:-2], "--judge", "stockfish"))
    err = capsys.readouterr().err
    # (the driver's own lines: Ray may forward the first run's RewardServer's exit into this capture)
    assert (
        code == EXIT_USER_ERROR and "Traceback" not in driver_err(err) and "preferences.judge model" in err
    ), err
    assert {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()} == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--margin-cp", "-1"], "preferences.margin_cp"),
        (["--k", "0"], "preferences.k"),
        (["--policy", "/nonexistent/model"], "not a saved model folder"),
        (["--judge", "model"], "preferences.reward_model (--reward-model) is not set"),
        (["--judge", "model", "--reward-model", "/nonexistent/judge"], "preferences.reward_model"),
    ],
)
def test_bad_input_is_one_clear_message(tmp_path, games, policy, local_ray, capsys, extra, message):
    code = preferences.main([*pref_args(tmp_path, games, policy), *extra])
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR, err
    assert "Traceback" not in err and message in err
    assert not (tmp_path / "p" / "preferences").exists()


def test_no_policy_and_bad_games_tables_are_one_clear_message(tmp_path, games, policy, local_ray, capsys):
    import pyarrow as pa

    # no sft model in this run and no --policy
    code = preferences.main(
        ["--config", "tiny", "--storage", str(tmp_path), "--no-tracking", "--games", str(games)]
    )
    assert code == EXIT_USER_ERROR and "run `chess-rl sft` first" in capsys.readouterr().err
    empty, wrong = tmp_path / "empty", tmp_path / "wrong"
    empty.mkdir()
    wrong.mkdir()
    pq.write_table(pa.table({"white": ["a"], "black": ["b"]}), wrong / "part-0.parquet")
    buffer = io.BytesIO()
    pq.write_table(
        pa.table({"game_id": pa.array([], pa.string()), "moves": pa.array([], pa.string())}), buffer
    )
    (tmp_path / "nogames").mkdir()
    (tmp_path / "nogames" / "part-0.parquet").write_bytes(buffer.getvalue())
    for folder, message in (
        (empty, "no games at"),
        (wrong, "no column game_id, moves"),
        (tmp_path / "nogames", "holds no games"),
    ):
        code = preferences.main(
            [
                "--config",
                "tiny",
                "--storage",
                str(tmp_path),
                "--no-tracking",
                "--games",
                str(folder),
                "--policy",
                str(policy),
            ]
        )
        err = capsys.readouterr().err
        assert code == EXIT_USER_ERROR and message in err and "Traceback" not in err, err
