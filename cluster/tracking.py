"""MLflow tracking: one parent run per invocation, one child run per phase.

>>> from cluster.config import TrackingSection
>>> tracker = Tracker(TrackingSection(enabled=False), storage_uri="./runs", run_name="demo")
>>> with tracker.invocation({"run.name": "demo"}), tracker.phase("prepare") as phase:
...     phase.log_metrics({"games_written": 10})

Where runs go: ``MLFLOW_TRACKING_URI`` if set, else ``tracking.uri``, else a sqlite file
``<storage>/mlflow.db`` for local storage. When storage is S3 (a cluster's), no S3 holds a
SQLite database and a ``ray job submit`` driver's working directory is deleted after the job, so
the file is ``~/.chess-rl/mlflow.db`` on the driver's machine (on a ``ray up`` cluster, the
head) and a consistent copy of it goes to ``<storage>/mlflow.db`` after each phase and at the end
(:class:`StoreCopy`; a head that has none, a new one after ``ray down``, starts from that copy).
One line on stdout says so. Artifacts of a run we create an experiment for go under
``<storage>/mlartifacts``. Params are the resolved config, flattened and with secrets redacted
(:func:`cluster.config.flatten`).

    mlflow ui --backend-store-uri sqlite:///$HOME/.chess-rl/mlflow.db   # on the head, or on a copy:
    aws s3 cp s3://chess-rl-runs/runs/mlflow.db . && mlflow ui --backend-store-uri sqlite:///mlflow.db
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cluster.config import TrackingSection, redact
from cluster.errors import UserError
from cluster.storage import Storage

_MAX_PARAM = 6000
#: The SQLite store of runs whose storage is remote and that name no tracking server: a file of the
#: driver's machine that outlives the job (a ``ray job submit`` working directory does not).
REMOTE_STORAGE_DB = "~/.chess-rl/mlflow.db"
#: Its copy, relative to the run's storage.
STORE_COPY = "mlflow.db"


def resolve_tracking_uri(config: TrackingSection, storage_uri: str) -> str:
    """``MLFLOW_TRACKING_URI`` > ``tracking.uri`` > sqlite under the (local) storage, or
    :data:`REMOTE_STORAGE_DB` when the storage is remote (S3)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if config.uri:
        return config.uri
    storage = Storage.from_uri(storage_uri)
    path = Path(storage.root) / "mlflow.db" if storage.is_local else Path(REMOTE_STORAGE_DB).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


class StoreCopy:
    """The copy under remote storage of the local SQLite store :func:`resolve_tracking_uri` chose
    for it: fetched when this machine has no store yet, published (a consistent snapshot, through
    SQLite's backup) after each phase. A copy that cannot be read or written is one line on
    stderr, never an error: tracking must not stop a run.

        copy = StoreCopy.of(uri, storage_uri)   # None: a server, or a store under local storage
        copy.fetch(); ...; copy.publish()
    """

    def __init__(self, db: Path, storage: Storage) -> None:
        self.db, self.storage = db, storage

    @classmethod
    def of(cls, uri: str, storage_uri: str) -> StoreCopy | None:
        storage = Storage.from_uri(storage_uri)
        db = Path(REMOTE_STORAGE_DB).expanduser()
        return cls(db, storage) if not storage.is_local and uri == f"sqlite:///{db}" else None

    @property
    def where(self) -> str:
        return self.storage.uri_of(STORE_COPY)

    def fetch(self) -> None:
        """The copy, as this machine's store, when there is none here yet."""
        try:
            if not self.db.exists() and self.storage.exists(STORE_COPY):
                self.db.write_bytes(self.storage.read_bytes(STORE_COPY))
        except Exception as exc:  # noqa: BLE001 - tracking must never stop a run
            print(
                f"[tracking] cannot read the MLflow store's copy {self.where}: {_first_line(exc)}",
                file=sys.stderr,
            )

    def publish(self) -> None:
        """A snapshot of this machine's store to the copy."""
        import sqlite3

        try:
            with tempfile.TemporaryDirectory() as tmp:
                snapshot = Path(tmp) / STORE_COPY
                with (
                    contextlib.closing(sqlite3.connect(self.db)) as src,
                    contextlib.closing(sqlite3.connect(snapshot)) as dst,
                ):
                    src.backup(dst)
                self.storage.upload_file(snapshot, STORE_COPY)
        except Exception as exc:  # noqa: BLE001 - tracking must never stop a run
            print(
                f"[tracking] cannot copy the MLflow store to {self.where}: {_first_line(exc)}",
                file=sys.stderr,
            )


class PhaseRun:
    """Handle on the active (child) run; every method is a no-op when tracking is off."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.run_id: str | None = None
        self.uri: str | None = None

    def log_metrics(self, metrics: Mapping[str, float | int], step: int | None = None) -> None:
        if not self.active:
            return
        import mlflow

        clean = {
            k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if clean:
            mlflow.log_metrics(clean, step=step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        if not self.active:
            return
        import mlflow

        mlflow.log_params({k: _param_value(k, v) for k, v in params.items()})

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        if not self.active:
            return
        import mlflow

        mlflow.log_dict(dict(data), name)

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        if not self.active:
            return
        import mlflow

        mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        if not self.active:
            return
        import mlflow

        mlflow.set_tags(dict(tags))


class Tracker:
    """Owns the MLflow parent run of one invocation and opens a child run per phase."""

    def __init__(self, config: TrackingSection, *, storage_uri: str, run_name: str) -> None:
        self.config = config
        self.storage_uri = storage_uri
        self.run_name = run_name
        self.uri: str | None = None
        self.parent_run_id: str | None = None
        self.experiment_id: str | None = None
        self.copy: StoreCopy | None = None  # the store's copy under remote storage (no server)

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    @contextlib.contextmanager
    def invocation(self, params: Mapping[str, Any] | None = None) -> Iterator[PhaseRun]:
        """The parent run: params = the resolved config (secrets redacted)."""
        if not self.enabled:
            yield PhaseRun(active=False)
            return
        import mlflow

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        self.uri = resolve_tracking_uri(self.config, self.storage_uri)
        self.copy = StoreCopy.of(self.uri, self.storage_uri)
        if self.copy is not None:
            self.copy.fetch()
            print(
                f"mlflow: no tracking server set (MLFLOW_TRACKING_URI, tracking.uri): runs go to {self.copy.db} on "
                f"{socket.gethostname()}, copied to {self.copy.where} after each phase; learner workers on other "
                'nodes track no per-step metrics there (docs/cluster.md, "MLflow on a cluster")',
                flush=True,
            )
        mlflow.set_tracking_uri(self.uri)
        try:
            self.experiment_id = self._experiment_id(mlflow)
        except Exception as exc:
            raise UserError(
                f"cannot use the MLflow tracking server at {redact('uri', self.uri)!r}: {_first_line(exc)}"
            ) from None
        try:
            with mlflow.start_run(experiment_id=self.experiment_id, run_name=self.run_name) as run:
                self.parent_run_id = run.info.run_id
                handle = PhaseRun(active=True)
                handle.run_id = run.info.run_id
                if params:
                    handle.log_params(params)
                yield handle
        finally:
            if self.copy is not None:
                self.copy.publish()

    @contextlib.contextmanager
    def phase(self, name: str, params: Mapping[str, Any] | None = None) -> Iterator[PhaseRun]:
        """A child run of the invocation for one phase."""
        if not self.enabled:
            yield PhaseRun(active=False)
            return
        import mlflow

        try:
            with mlflow.start_run(experiment_id=self.experiment_id, run_name=name, nested=True) as run:
                handle = PhaseRun(active=True)
                handle.run_id = run.info.run_id
                handle.uri = self.uri
                mlflow.set_tags({"chess_rl.phase": name, "chess_rl.run": self.run_name})
                if params:
                    handle.log_params(params)
                yield handle
        finally:
            if self.copy is not None:  # the phase's run, ended, in the copy: a killed job keeps it
                self.copy.publish()

    def _experiment_id(self, mlflow: Any) -> str:
        existing = mlflow.get_experiment_by_name(self.config.experiment)
        if existing is not None:
            return str(existing.experiment_id)
        artifact_location = None
        if not (self.uri or "").startswith(("http://", "https://", "databricks")):
            storage = Storage.from_uri(self.storage_uri)
            artifact_location = (
                storage.uri_of("mlartifacts")
                if not storage.is_local
                else Path(storage.path("mlartifacts")).as_uri()
            )
        return str(mlflow.create_experiment(self.config.experiment, artifact_location=artifact_location))


def write_json_artifact(phase: PhaseRun, data: Mapping[str, Any], name: str) -> None:
    """Log ``data`` as a JSON file artifact (works for every artifact store)."""
    if not phase.active:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps(data, indent=2, sort_keys=True))
        phase.log_artifact(path)


def _param_value(key: str, value: Any) -> str:
    value = redact(key, value)
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= _MAX_PARAM else text[: _MAX_PARAM - 3] + "..."


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class RunMetricsLogger:
    """Logs metrics to an existing MLflow run from another process (a Ray Train worker).

    >>> RunMetricsLogger(None, None).log({"loss": 1.0}, step=1)   # tracking off: a no-op

    MLflow errors are reported once on stderr and never stop training.
    """

    def __init__(self, uri: str | None, run_id: str | None) -> None:
        self.uri, self.run_id = uri, run_id
        self._client: Any = None
        self._failed = False

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if not (self.uri and self.run_id) or self._failed:
            return
        clean = {
            k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if not clean:
            return
        if self._store_elsewhere():
            return
        try:
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient

            if self._client is None:
                self._client = MlflowClient(tracking_uri=self.uri)
            now = int(time.time() * 1000)
            self._client.log_batch(
                self.run_id,
                metrics=[Metric(key=k, value=v, timestamp=now, step=step) for k, v in clean.items()],
            )
        except Exception as exc:  # noqa: BLE001 - tracking must never stop training
            self._failed = True
            print(
                f"[tracking] cannot log metrics to MLflow run {self.run_id}: {_first_line(exc)}",
                file=sys.stderr,
            )

    def _store_elsewhere(self) -> bool:
        """Whether the run's store is a SQLite file of another machine (the driver's, the run's
        storage remote): one line then, and no empty database made here in its place."""
        path = self.uri[len("sqlite:///") :] if (self.uri or "").startswith("sqlite:///") else None
        if path is None or os.path.exists(path):
            return False
        self._failed = True
        print(
            f"[tracking] the MLflow store {path} is on the driver's machine, not on {socket.gethostname()}: "
            "this worker's per-step metrics are not tracked (set MLFLOW_TRACKING_URI to a server; docs/cluster.md)",
            file=sys.stderr,
        )
        return True
