"""MLflow's default store when the run's storage is remote: a SQLite file of the driver's machine
that outlives a ``ray job submit`` job (not its working directory), copied under the storage after
each phase and fetched back on a machine without one; workers on other machines say in one line
that they track nothing there instead of making an empty database of their own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cluster.config import TrackingSection
from cluster.storage import Storage
from cluster.tracking import REMOTE_STORAGE_DB, RunMetricsLogger, StoreCopy, Tracker, resolve_tracking_uri


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_REGION", "us-west-2")  # no region lookup: nothing here reaches AWS
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "home"


def test_remote_storage_keeps_the_store_in_the_home_folder_with_a_copy_under_the_storage(home: Path) -> None:
    uri = resolve_tracking_uri(TrackingSection(), "s3://chess-rl-runs/runs")
    assert uri == f"sqlite:///{home / '.chess-rl' / 'mlflow.db'}" and (home / ".chess-rl").is_dir()
    copy = StoreCopy.of(uri, "s3://chess-rl-runs/runs")
    assert copy is not None and copy.where == "s3://chess-rl-runs/runs/mlflow.db"
    assert copy.db == Path(REMOTE_STORAGE_DB).expanduser()


def test_local_storage_or_a_named_server_needs_no_copy(home: Path, tmp_path: Path) -> None:
    local = resolve_tracking_uri(TrackingSection(), str(tmp_path / "runs"))
    assert local == f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert StoreCopy.of(local, str(tmp_path / "runs")) is None
    named = resolve_tracking_uri(TrackingSection(uri="http://mlflow:5000"), "s3://chess-rl-runs/runs")
    assert StoreCopy.of(named, "s3://chess-rl-runs/runs") is None


def _rows(db: Path) -> list[tuple[str]]:
    with sqlite3.connect(db) as con:
        return con.execute("select name from runs").fetchall()


def test_the_copy_is_a_consistent_snapshot_and_a_new_machine_starts_from_it(tmp_path: Path) -> None:
    db, bucket = tmp_path / "home" / "mlflow.db", Storage.from_uri(str(tmp_path / "bucket"))
    db.parent.mkdir()
    with sqlite3.connect(db) as con:
        con.execute("create table runs (name text)")
        con.execute("insert into runs values ('sft')")
    copy = StoreCopy(db, bucket)
    copy.publish()
    assert _rows(Path(bucket.path("mlflow.db"))) == [("sft",)]
    with sqlite3.connect(db) as con:
        con.execute("insert into runs values ('reward')")
    copy.fetch()  # a store here already: kept as it is
    assert _rows(db) == [("sft",), ("reward",)]
    db.unlink()  # a new head after `ray down` and `ray up`
    copy.fetch()
    assert _rows(db) == [("sft",)]


def test_a_copy_that_cannot_be_written_is_one_line_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    StoreCopy(tmp_path / "missing" / "mlflow.db", Storage.from_uri(str(tmp_path / "bucket"))).publish()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[tracking] cannot copy the MLflow store to ")


def test_a_worker_on_another_machine_tracks_nothing_and_makes_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "driver-home" / "mlflow.db"
    logger = RunMetricsLogger(f"sqlite:///{elsewhere}", "run-id")
    logger.log({"loss": 1.0}, step=1)
    logger.log({"loss": 0.5}, step=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is on the driver's machine" in err[0] and "MLFLOW_TRACKING_URI" in err[0]
    assert not elsewhere.exists() and not elsewhere.parent.exists()


def test_a_tracked_phase_on_remote_storage_says_where_and_lands_in_the_copy(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole path, with the bucket standing in as a local folder."""
    bucket = Storage.from_uri(str(tmp_path / "bucket"))
    of = StoreCopy.of
    monkeypatch.setattr(
        StoreCopy, "of", classmethod(lambda cls, uri, s: (c := of(uri, s)) and cls(c.db, bucket))
    )
    tracker = Tracker(TrackingSection(), storage_uri="s3://chess-rl-runs/runs", run_name="demo")
    monkeypatch.setattr(
        Tracker, "_experiment_id", lambda self, mlflow: str(mlflow.create_experiment("chess-rl"))
    )
    with tracker.invocation({"run.name": "demo"}), tracker.phase("prepare") as phase:
        phase.log_metrics({"games_written": 10})
    out = capsys.readouterr().out
    assert f"runs go to {home / '.chess-rl' / 'mlflow.db'} on " in out and "copied to " in out
    from mlflow.tracking import MlflowClient

    copied = MlflowClient(tracking_uri=f"sqlite:///{bucket.path('mlflow.db')}")
    runs = copied.search_runs([copied.get_experiment_by_name("chess-rl").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["demo", "prepare"]
    assert [r.data.metrics for r in runs if r.info.run_name == "prepare"] == [{"games_written": 10.0}]
