"""What every phase's ``main(argv)`` shares: flags, config, Ray, MLflow, errors, exit codes.

A phase module declares a :class:`Phase` and calls :func:`run_phase`::

    PHASE = Phase(name="prepare", summary="PGN -> games Parquet", section="prepare",
                  section_model=PrepareConfig, run=run_prepare)

    def main(argv=None) -> int:
        return run_phase(PHASE, argv)

``python -m pipelines.prepare`` and ``chess-rl prepare`` both end up here. Exit codes: 0 done,
1 the phase ran but produced nothing usable, 2 a user error (one line on stderr, no traceback),
130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cluster.config import (
    add_section_flags,
    available_presets,
    flatten,
    load_config,
    overrides_from_args,
    parse_set_overrides,
    resolve_preset,
)
from cluster.errors import ConfigError, LostWorkersError, StorageError, UserError
from cluster.progress import clock
from cluster.runtime import RayInfo, quiet_driver, ray_session
from cluster.storage import Storage
from cluster.tracking import PhaseRun, Tracker, write_json_artifact
from pipelines.common.config_record import note_config_change, recording_config, section_record
from pipelines.config import ChessRLConfig

EXIT_OK, EXIT_EMPTY, EXIT_USER_ERROR, EXIT_LOST, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


@dataclass
class PhaseResult:
    """What a phase hands back: a JSON-able summary, the lines to print, and whether it produced anything."""

    summary: dict[str, Any]
    lines: list[str] = field(default_factory=list)
    ok: bool = True


@dataclass
class PhaseContext:
    """Everything a phase's ``run`` needs besides its config."""

    config: ChessRLConfig
    run_storage: Storage  # <storage>/<run>
    tracking: PhaseRun
    ray: RayInfo
    log: Callable[[str], None]
    #: Phases whose folder is somewhere else than ``<run>/<phase>`` (a ``tune`` trial writes its
    #: phase's outputs under the sweep, and reads the other phases' outputs from the run).
    outputs: dict[str, Storage] = field(default_factory=dict)
    #: Extra Ray Train callbacks for the phase's learner (a ``tune`` trial's TuneReportCallback).
    train_callbacks: list[Any] = field(default_factory=list)

    def phase_storage(self, phase: str) -> Storage:
        """Where ``phase``'s outputs are: ``<run>/<phase>`` unless :attr:`outputs` says otherwise."""
        return self.outputs.get(phase) or self.run_storage.child(phase)


@dataclass(frozen=True)
class Inputs:
    """Where a phase's check finds the inputs it reads from other phases (``<run>/<phase>``), and
    which of those phases an earlier phase of the same ``rlaif`` graph run will write first: their
    outputs do not exist yet, so a check takes them as given (the phase's ``run`` checks them
    again when it starts)."""

    run_storage: Storage  # <storage>/<run>
    produced: frozenset[str] = frozenset()
    #: Phases whose folder is somewhere else than ``<run>/<phase>`` (see PhaseContext.outputs).
    outputs: dict[str, Storage] = field(default_factory=dict)

    @classmethod
    def of(cls, config: ChessRLConfig, produced: frozenset[str] = frozenset()) -> Inputs:
        """The inputs of a command about to run with ``config`` (before Ray starts)."""
        return cls(Storage.from_uri(config.run.storage).child(config.run.name), frozenset(produced))

    @classmethod
    def of_context(cls, context: PhaseContext) -> Inputs:
        """The inputs of a running phase: nothing is taken as given any more."""
        return cls(context.run_storage, frozenset(), dict(context.outputs))

    def folder(self, phase: str) -> Storage:
        """``phase``'s folder: ``<run>/<phase>`` unless :attr:`outputs` says otherwise."""
        return self.outputs.get(phase) or self.run_storage.child(phase)

    def will_write(self, phase: str) -> bool:
        """Whether an earlier phase of this graph run writes ``phase``'s outputs (not checked)."""
        return phase in self.produced


@dataclass(frozen=True)
class Phase:
    name: str
    summary: str
    section: str
    section_model: type[BaseModel]
    run: Callable[[PhaseContext], PhaseResult]
    description: str = ""
    needs_ray: bool = True
    #: Checks every input the phase reads (files, models, players, storage URIs, suite and opening
    #: files, config values across sections), with no Ray: ``run_phase`` and the ``rlaif`` graph
    #: run it before Ray starts (a UserError: one ``error:`` line, exit 2).
    check: Callable[[ChessRLConfig, Inputs], object] | None = None
    #: The folder under the run that holds what the phase resumes from (checkpoints, shards):
    #: its name, or a function of the config (``sft-board``, ``online-dpo``). ``run_phase`` keeps
    #: the section that last wrote there in it (:func:`note_config_change`); None: no such folder.
    folder: str | Callable[[ChessRLConfig], str] | None = None

    def output_folder(self, config: ChessRLConfig) -> str | None:
        """The run's folder this phase resumes from with ``config`` (None: it has none)."""
        return self.folder(config) if callable(self.folder) else self.folder

    def main(self, argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
        """The phase's command: ``chess-rl <name>`` and ``python -m pipelines.<name>`` (see :func:`run_phase`)."""
        return run_phase(self, argv, prog=prog)


def build_parser(
    phase: Phase, prog: str | None = None
) -> tuple[argparse.ArgumentParser, dict[str, tuple[str, str]]]:
    parser = argparse.ArgumentParser(
        prog=prog or f"python -m pipelines.{phase.name}",
        description=f"{phase.summary}\n\n{phase.description}".strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Config: a preset ("
            + ", ".join(available_presets())
            + ") or a YAML file, then the flags above, then "
            "--set SECTION.KEY=VALUE. Defaults shown are the built-in ones; a preset may set others. "
            "Ray: RAY_ADDRESS or --address joins a cluster; otherwise an embedded "
            "local Ray starts. MLflow: MLFLOW_TRACKING_URI wins over tracking.uri."
        ),
    )
    common = parser.add_argument_group("common")
    common.add_argument(
        "--config", default="tiny", metavar="PRESET|FILE", help="preset name or YAML file [default: tiny]"
    )
    common.add_argument(
        "--run-name", dest="run__name", metavar="NAME", help="run name; outputs go to <storage>/<name>/"
    )
    common.add_argument(
        "--storage", dest="run__storage", metavar="URI", help="local path, file:// or s3://bucket/prefix"
    )
    common.add_argument("--seed", dest="run__seed", metavar="N", type=int, help="random seed")
    common.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster to join ('auto', host:6379); default: RAY_ADDRESS, else embedded",
    )
    common.add_argument(
        "--num-cpus", dest="ray__num_cpus", metavar="N", help="CPUs of the embedded local Ray"
    )
    common.add_argument(
        "--dashboard",
        dest="ray__dashboard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start the Ray dashboard with the embedded local Ray (binds to loopback)",
    )
    common.add_argument(
        "--tracking",
        dest="tracking__enabled",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log to MLflow [default: on]",
    )
    common.add_argument(
        "--tracking-uri",
        dest="tracking__uri",
        metavar="URI",
        help="MLflow tracking URI (MLFLOW_TRACKING_URI wins)",
    )
    common.add_argument(
        "--set",
        dest="set_items",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any config key, e.g. --set prepare.min_elo=2000 (repeatable)",
    )
    mapping = {
        "run__name": ("run.name", "--run-name"),
        "run__storage": ("run.storage", "--storage"),
        "run__seed": ("run.seed", "--seed"),
        "ray__num_cpus": ("ray.num_cpus", "--num-cpus"),
        "ray__dashboard": ("ray.dashboard", "--dashboard"),
        "tracking__enabled": ("tracking.enabled", "--tracking"),
        "tracking__uri": ("tracking.uri", "--tracking-uri"),
    }
    group = parser.add_argument_group(phase.name)
    mapping.update(add_section_flags(group, phase.section_model, phase.section))
    return parser, mapping


def saved_model(path: str, key: str) -> str:
    """``path`` when it is a folder (local, ``file://`` or ``s3://``) holding a saved model's
    ``config.json``; otherwise one StorageError naming ``key``."""
    if "://" not in path or path.startswith("file://"):
        found = Path(path.removeprefix("file://"), "config.json").is_file()
    else:
        found = Storage.from_uri(path).exists("config.json")
    if not found:
        raise StorageError(f"{key}: {path} is not a saved model folder (no config.json)")
    return path


def readable_model(path: str, key: str, kind: str = "policy") -> None:
    """:func:`chessrl.arena.saved_models.check_saved_model` (config.json and every weights file
    whole, without loading), its one line prefixed with ``key``: a damaged model is refused in
    the driver, before Ray starts, like a missing one."""
    from chessrl.arena.saved_models import check_saved_model

    try:
        check_saved_model(path, kind)
    except UserError as exc:
        raise type(exc)(f"{key}: {exc}") from None


def gpt2_config(path: str, key: str, architecture: str, needs: str) -> dict[str, Any]:
    """The ``config.json`` of a saved GPT-2-style model whose ``architectures`` hold
    ``architecture`` (``GPT2LMHeadModel``: a policy; ``GPT2ForSequenceClassification``: a reward
    model), its weights checked whole (:func:`readable_model`). A missing or unreadable model, or
    another kind, is one clear error naming ``key`` and saying what the phase ``needs``: the one
    check of a model path that grpo, dpo and ppo share."""
    from chessrl.lm.checkpoints import checkpoint_config

    try:
        config: dict[str, Any] = checkpoint_config(path)
    except Exception as exc:  # noqa: BLE001 - a missing or unreadable checkpoint, said once
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StorageError(f"{key}: cannot read {path}/config.json: {text}") from None
    arch = config.get("architectures") or []
    if config.get("model_type") != "gpt2" or architecture not in arch:
        raise ConfigError(
            f"{key}: {path} is a {config.get('model_type') or 'model_type-less'} {'/'.join(arch) or 'checkpoint'}; {needs}"
        )
    readable_model(path, key, "reward" if architecture == "GPT2ForSequenceClassification" else "policy")
    return config


def location(folder: Storage) -> str:
    """How a phase hands a folder on: a local path, or the URI."""
    return folder.root if folder.is_local else folder.uri


def model_location(
    path: str | None, default: Storage, key: str, producer: str, *, produced: bool = False
) -> str:
    """A saved model's folder or URI: ``path``, else ``default`` (``<run>/<producer>/model``); a
    missing one is one clear StorageError naming ``key``. ``produced``: an earlier phase of the
    same graph run writes ``default``, so it is not looked for."""
    if path:
        return saved_model(path, key)
    if not produced and not default.exists("config.json"):
        flag = key.split("(")[-1].rstrip(")")
        raise StorageError(
            f"no model at {default.uri}: run `chess-rl {producer}` first, or pass {flag} DIR|s3://..."
        )
    return location(default)


def resolve_config(
    phase: Phase, args: argparse.Namespace, mapping: dict[str, tuple[str, str]]
) -> ChessRLConfig:
    overrides = parse_set_overrides(args.set_items)
    overrides.update(overrides_from_args(args, mapping))
    return load_config(ChessRLConfig, path=resolve_preset(args.config), overrides=overrides)


def run_phase(phase: Phase, argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Parse ``argv``, resolve the config, start Ray and MLflow, run the phase, print its summary."""
    parser, mapping = build_parser(phase, prog)
    args = parser.parse_args(list(argv) if argv is not None else None)
    log = phase_logger(phase.name)

    def body() -> int:
        quiet_driver()
        config = resolve_config(phase, args, mapping)
        if phase.check is not None:  # every input, before Ray starts
            phase.check(config, Inputs.of(config))
        run_storage = Storage.from_uri(config.run.storage).child(config.run.name)
        params = flatten(config)
        log(f"run {config.run.name!r} -> {run_storage.uri}")
        folder = None if (name := phase.output_folder(config)) is None else run_storage.child(name)
        record = section_record(phase.section, config)
        if folder is not None:
            note_config_change(folder, record, log)
        log(
            "config: "
            + json.dumps({k: v for k, v in flatten(config).items() if k.startswith(f"{phase.section}.")})
        )
        tracker = Tracker(config.tracking, storage_uri=config.run.storage, run_name=config.run.name)
        started = time.perf_counter()
        with ray_session(config.ray, args.address, log=log) as ray_info:
            log(
                f"ray: {ray_info.mode} cluster at {ray_info.address}, {int(ray_info.resources.get('CPU', 0))} CPUs"
                + (f", dashboard {ray_info.dashboard_url}" if ray_info.dashboard_url else "")
            )
            for note in ray_info.notes:
                log(f"ray: {note}")
            check_paths_on_nodes(config, (phase.section,), ray_info.mode, log)
            with (
                recording_config(folder, record),
                tracker.invocation(params),
                tracker.phase(phase.name, params) as tracking,
            ):
                context = PhaseContext(
                    config=config, run_storage=run_storage, tracking=tracking, ray=ray_info, log=log
                )
                result = execute(phase, context, started)
        for line in result.lines:
            print(line, flush=True)
        if tracker.enabled and tracker.uri:
            print(
                f"mlflow: run {tracker.parent_run_id} in experiment {config.tracking.experiment!r} at {_redacted(tracker.uri)}",
                flush=True,
            )
        return EXIT_OK if result.ok else EXIT_EMPTY

    return exit_code(body)


def local_paths(config: ChessRLConfig, sections: Sequence[str]) -> dict[str, str]:
    """The local paths (not URIs) a run reads or writes, by config key: ``run.storage`` and, in
    ``sections``, every model key, ``games`` and ``inputs``.

    >>> cfg = load_config(ChessRLConfig, path=resolve_preset("tiny"), overrides={
    ...     "grpo.policy": ("/models/sft", "--policy"), "run.storage": ("s3://bucket/runs", "--storage")})
    >>> local_paths(cfg, ["grpo"])
    {'grpo.policy': '/models/sft'}
    """
    from cluster.config import absolute_local_path

    def local(value: object) -> str | None:
        if not isinstance(value, str) or not value or ("://" in value and not value.startswith("file://")):
            return None
        return os.path.abspath(value.removeprefix("file://"))

    out: dict[str, str] = {}
    if (storage := local(config.run.storage)) is not None:
        out["run.storage"] = storage
    for name in sections:
        section = getattr(config, name, None)
        if not isinstance(section, BaseModel):
            continue
        for key, info in type(section).model_fields.items():
            value = getattr(section, key)
            is_model = _validated_by(info.annotation, absolute_local_path) or any(
                getattr(m, "func", None) is absolute_local_path for m in info.metadata
            )
            for i, item in enumerate(value if key == "inputs" and isinstance(value, list) else [value]):
                if (is_model or key in ("games", "inputs")) and (path := local(item)) is not None:
                    out[f"{name}.{key}" + (f"[{i}]" if key == "inputs" else "")] = path
    return out


def _validated_by(annotation: object, func: object) -> bool:
    """Whether a type (``ModelPath | None``: the validator sits inside the union) carries an
    ``AfterValidator(func)``."""
    import typing

    if any(getattr(m, "func", None) is func for m in getattr(annotation, "__metadata__", ())):
        return True
    return any(_validated_by(arg, func) for arg in typing.get_args(annotation))


def check_paths_on_nodes(
    config: ChessRLConfig, sections: Sequence[str], mode: str, log: Callable[[str], None] | None = None
) -> None:
    """On a cluster joined (not the embedded one), a local path some node cannot read is one
    ConfigError naming its key, before any work: each node would otherwise read its own disk,
    or nothing (:func:`cluster.runtime.paths_other_nodes_cannot_read`)."""
    from cluster.runtime import paths_other_nodes_cannot_read

    if mode != "joined":
        return
    unreadable = paths_other_nodes_cannot_read(local_paths(config, sections), log=log)
    if unreadable:
        raise ConfigError(unreadable[0])


def execute(phase: Phase, context: PhaseContext, started: float | None = None) -> PhaseResult:
    """Run ``phase`` in ``context`` (a UserError from inside a Ray task arrives as itself), with
    the summary's ``seconds`` (from ``started``, default now) and ``summary.json`` logged to the
    phase's MLflow run. ``run_phase`` and the ``rlaif`` graph both run phases through it."""
    started = time.perf_counter() if started is None else started
    with keep_talking(context.log):
        result = _unwrap_ray_errors(phase.run, context)
    result.summary.setdefault("seconds", round(time.perf_counter() - started, 3))
    write_json_artifact(context.tracking, result.summary, "summary.json")
    return result


def exit_code(body: Callable[[], int]) -> int:
    """``body()``'s exit code; a UserError is one ``error:`` line on stderr and exit 2, Ctrl-C
    is exit 130 (every command's ``main`` ends here)."""
    try:
        return body()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except LostWorkersError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_LOST
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def _unwrap_ray_errors(fn: Callable[[PhaseContext], PhaseResult], context: PhaseContext) -> PhaseResult:
    """A UserError raised inside a Ray task reaches the user as that error, not a remote traceback;
    processes lost with a node or killed (and nothing else) are one :class:`LostWorkersError`."""
    from cluster.errors import lost_processes

    try:
        return fn(context)
    except UserError:
        raise
    except Exception as exc:
        cause = getattr(exc, "cause", None)
        while cause is not None and not isinstance(cause, UserError):
            cause = getattr(cause, "cause", None) or cause.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        lost = lost_processes(exc)
        if lost:
            what = ", ".join(f"{n} x {k}" if n > 1 else k for k, n in Counter(lost).items())
            raise LostWorkersError(
                f"Ray processes this run needed were lost ({what}): a node left the cluster or a worker "
                "was killed. Run the same command again: it resumes from what was saved (the last checkpoint, "
                "the shards written)"
            ) from None
        raise


def _redacted(uri: str) -> str:
    from cluster.config import redact

    return str(redact("uri", uri))


@dataclass
class _LastLine:
    """When the driver last printed a ``[phase]`` line, and what it said (for :func:`keep_talking`)."""

    at: float = field(default_factory=time.monotonic)  # any line, reminders included
    text: str = ""
    text_at: float = field(default_factory=time.monotonic)  # when ``text`` was printed


_LAST_LINE = _LastLine()
_LINE_LOCK = threading.RLock()  # a reminder and a driver line never interleave


def _say(line: str, message: str, write: Callable[[str], None] | None) -> None:
    """Print ``line`` (or hand it to ``write``) and remember ``message`` as the last thing said.
    Module-level so that a logger pickled into a Ray task refers to it instead of copying a lock."""
    with _LINE_LOCK:
        if write is None:
            print(line, file=sys.stderr, flush=True)
        else:
            write(line)
        _LAST_LINE.at = _LAST_LINE.text_at = time.monotonic()
        _LAST_LINE.text = message


def phase_logger(name: str, write: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """``[name] message`` lines on stderr (silent with ``CHESS_RL_QUIET=1``), or to ``write``.

    >>> lines = []
    >>> phase_logger("grpo", write=lines.append)("scoring the held-out prompts")
    >>> lines
    ['[grpo] scoring the held-out prompts']
    """
    quiet = os.environ.get("CHESS_RL_QUIET") == "1"

    def log(message: str) -> None:
        if not quiet:
            _say(f"[{name}] {message}", message, write)

    return log


@contextlib.contextmanager
def keep_talking(log: Callable[[str], None], every_s: float = 25.0) -> Iterator[None]:
    """While the block runs, a line whenever the driver has said nothing for ``every_s`` seconds
    (a model loading, a long evaluation, Ray starting workers), so that no run looks hung::

        [grpo] still working, 0:25 since: trained in 248 s; the start and final policies on ...
    """
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(1.0):
            with _LINE_LOCK:  # a driver line printed meanwhile waits, then is the one named next
                if time.monotonic() - _LAST_LINE.at < every_s:
                    continue
                text, text_at = _LAST_LINE.text, _LAST_LINE.text_at
                since = clock(time.monotonic() - text_at)
                said = f" since: {text[:100]}{'...' if len(text) > 100 else ''}" if text else " elapsed"
                log(f"still working, {since}{said}")
                _LAST_LINE.text, _LAST_LINE.text_at = text, text_at  # the next one names the same line

    with _LINE_LOCK:  # silence counts from here; "since" from the line a reminder names
        _LAST_LINE.at = time.monotonic()
        if not _LAST_LINE.text:  # nothing said yet in this process: the time is the block's
            _LAST_LINE.text_at = _LAST_LINE.at
    watcher = threading.Thread(target=watch, name="keep-talking", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=5)
