"""MLflow tracking: one parent run per invocation, one child run per phase.

>>> from cluster.config import TrackingSection
>>> tracker = Tracker(TrackingSection(enabled=False), storage_uri="./runs", run_name="demo")
>>> with tracker.invocation({"run.name": "demo"}), tracker.phase("prepare") as phase:
...     phase.log_metrics({"games_written": 10})

Where runs go: ``MLFLOW_TRACKING_URI`` if set, else ``tracking.uri``, else a sqlite file
``<storage>/mlflow.db`` for local storage (``./runs/mlflow.db`` when storage is S3). Artifacts of
a run we create an experiment for go under ``<storage>/mlartifacts``. Params are the resolved
config, flattened and with secrets redacted (:func:`cluster.config.flatten`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
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


def resolve_tracking_uri(config: TrackingSection, storage_uri: str) -> str:
    """``MLFLOW_TRACKING_URI`` > ``tracking.uri`` > sqlite under the (local) storage."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if config.uri:
        return config.uri
    storage = Storage.from_uri(storage_uri)
    folder = Path(storage.root) if storage.is_local else Path("runs").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


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
        mlflow.set_tracking_uri(self.uri)
        try:
            self.experiment_id = self._experiment_id(mlflow)
        except Exception as exc:
            raise UserError(
                f"cannot use the MLflow tracking server at {redact('uri', self.uri)!r}: {_first_line(exc)}"
            ) from None
        with mlflow.start_run(experiment_id=self.experiment_id, run_name=self.run_name) as run:
            self.parent_run_id = run.info.run_id
            handle = PhaseRun(active=True)
            handle.run_id = run.info.run_id
            if params:
                handle.log_params(params)
            yield handle

    @contextlib.contextmanager
    def phase(self, name: str, params: Mapping[str, Any] | None = None) -> Iterator[PhaseRun]:
        """A child run of the invocation for one phase."""
        if not self.enabled:
            yield PhaseRun(active=False)
            return
        import mlflow

        with mlflow.start_run(experiment_id=self.experiment_id, run_name=name, nested=True) as run:
            handle = PhaseRun(active=True)
            handle.run_id = run.info.run_id
            handle.uri = self.uri
            mlflow.set_tags({"chess_rl.phase": name, "chess_rl.run": self.run_name})
            if params:
                handle.log_params(params)
            yield handle

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
