"""The ParameterServer: versioned weights for every phase whose workers act with a model the learner
keeps improving (self-play collectors; PPO and GRPO rollout collectors).

    server = ParameterServer.options(name="demo/parameter-server").remote()
    ray.get(server.publish.remote(state_dict, 1))
    stopped, newer = ray.get(server.poll.remote(0))      # (False, (1, [ref])) -> ray.get(ref)

Weights travel through the object store: ``publish`` puts them there from this actor (so their
life does not depend on the publisher's) and ``newer_than(v)`` hands out the reference, never the
weights, so a poll is cheap whether or not there is something new.
"""

from __future__ import annotations

from typing import Any

import ray


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class ParameterServer:
    """Versioned weights. ``publish`` keeps a state dict (put in the object store by this actor,
    so its life does not depend on the publisher's); ``newer_than(v)`` returns ``(version, [ref])``
    when it holds a newer version, else None. ``stop`` tells collectors to finish."""

    def __init__(self) -> None:
        self.version = -1
        self.ref: ray.ObjectRef | None = None
        self.stopped = False
        self.failures: list[str] = []

    def publish(self, state_dict: dict[str, Any], version: int) -> int:
        """Hold new weights as ``version``, or as the next version when that is not newer than
        the one held (a resumed learner); returns the version given."""
        self.version = max(version, self.version + 1)
        self.ref = ray.put(state_dict)
        return self.version

    def newer_than(self, version: int) -> tuple[int, list[ray.ObjectRef]] | None:
        if self.ref is None or self.version <= version:
            return None
        return self.version, [self.ref]  # in a list, so the caller gets the ref, not the weights

    def poll(self, version: int) -> tuple[bool, tuple[int, list[ray.ObjectRef]] | None]:
        """``(stopped, newer_than(version))`` in one call."""
        return self.stopped, self.newer_than(version)

    def current_version(self) -> int:
        return self.version

    def stop(self) -> None:
        self.stopped = True

    def report_failure(self, message: str) -> None:
        """A collector's ``run`` raised: the learner stops waiting for its games."""
        self.failures.append(message)

    def failure(self) -> str | None:
        return "; ".join(self.failures) or None
