"""The user-facing error tree.

Everything a user can get wrong (a config key, a path, a URI, a malformed input file) raises a
subclass of :class:`UserError` whose message names the thing, quotes the bad value and says what
is allowed. Entry points catch ``UserError`` and print ``error: <message>`` without a traceback;
anything else is a bug and keeps its traceback.

>>> str(ConfigError("prepare.min_elo: -5 is not allowed: must be >= 0", source="configs/tiny.yaml"))
'configs/tiny.yaml: prepare.min_elo: -5 is not allowed: must be >= 0'
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave us: printed as one line, never with a traceback."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class ConfigError(UserError, ValueError):
    """A bad config file, key or value."""


class StorageError(UserError, OSError):
    """A missing path, an unsupported URI scheme, or an unreachable bucket."""


class InputDataError(UserError, ValueError):
    """Input data that cannot be used at all (as opposed to bad records, which are counted)."""


class LostWorkersError(Exception):
    """A Ray process a phase needed (a learner worker, an engine or rollout actor) died with its
    node or was killed, and the phase could not go on: printed as one line (what was lost, how to
    resume), exit 3. Not the user's mistake, not a bug: the same command resumes from the last
    checkpoint."""


_PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crashing",
    "NCCL communicator was aborted",
    "remote process exited or there was a network error",
)
"""What gloo's and NCCL's collectives say when a process of the group has died."""


def lost_processes(exc: BaseException) -> list[str] | None:
    """What died, when ``exc`` says that Ray processes were lost and nothing else went wrong: a
    Ray Train worker group's failures (every rank's: a failed health check, an actor or node that
    died or went unavailable, in the worker or in what it called), or one such error itself; None
    for anything else (a bug keeps its traceback)."""
    try:
        import ray.exceptions as rex
        from ray.train import TrainingFailedError, WorkerGroupError
        from ray.train.v2._internal.exceptions import (
            WorkerHealthCheckFailedError,
            WorkerHealthCheckTimeoutError,
        )
    except ImportError:  # pragma: no cover - a Ray without them
        return None
    died = (
        rex.ActorDiedError,
        rex.ActorUnavailableError,
        rex.NodeDiedError,
        rex.WorkerCrashedError,
        rex.OwnerDiedError,
        WorkerHealthCheckFailedError,
        WorkerHealthCheckTimeoutError,
    )

    def kind(error: BaseException | None) -> str | None:
        seen = 0
        while error is not None and seen < 8:
            if getattr(
                error, "actor_init_failed", False
            ):  # its __init__ raised: a bug or bad input, not a lost node
                return None
            if isinstance(error, died):
                return type(error).__name__
            if isinstance(error, RuntimeError) and any(m in str(error) for m in _PEER_GONE):
                return "a learner peer's connection closed"  # gloo / NCCL: the peer process died
            if isinstance(error, rex.RayTaskError):
                error = error.cause if isinstance(error.cause, BaseException) else error.__cause__
            elif isinstance(
                getattr(error, "_base_exc", None), BaseException
            ):  # Ray Train's user-code wrapper
                error = error._base_exc  # type: ignore[attr-defined]
            else:
                error = error.__cause__ or error.__context__
            seen += 1
        return None

    if isinstance(exc, WorkerGroupError):
        kinds = [kind(e) for e in exc.worker_failures.values()]
        return [k for k in kinds if k] if kinds and all(kinds) else None
    if isinstance(exc, TrainingFailedError):
        return None
    found = kind(exc)
    return [found] if found else None
