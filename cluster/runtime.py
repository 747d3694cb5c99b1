"""Get a Ray cluster: join the one in ``--address``/``RAY_ADDRESS``, or start an embedded one.

>>> from cluster.config import RaySection
>>> with ray_session(RaySection(num_cpus=1)) as info:  # doctest: +SKIP
...     print(info.mode, info.resources["CPU"])
embedded 1.0

Inside ``ray job submit`` the job supervisor sets ``RAY_ADDRESS``, so the same command joins the
cluster it was submitted to. Ray 2.60 turns token authentication on by default: an embedded Ray
makes its own token (``~/.ray/auth_token``), and joining a cluster uses ``RAY_AUTH_TOKEN`` or
that file. The embedded dashboard, when asked for, binds to loopback unless configured
otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cluster.config import RaySection
from cluster.errors import ConfigError, UserError

GiB = 1 << 30


@dataclass(frozen=True)
class RayInfo:
    """What we are running on."""

    mode: str  # "embedded", "joined" or "existing" (ray was already initialised by the caller)
    address: str
    resources: dict[str, float] = field(default_factory=dict)
    dashboard_url: str | None = None
    notes: tuple[str, ...] = ()  # one line each, for the phase's log


# Ray Train's PlacementGroupCleaner asks the state API, once a second, whether its controller is
# alive. An embedded Ray without the dashboard has no state API: the cleaner can never clean, and
# it logs a warning each second of every training run (hundreds of lines in the demo). Everything
# an embedded Ray started dies with the driver anyway, so its workers keep that logger to errors
# (with or without the dashboard).
PLACEMENT_GROUP_CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"


#: Ray's warning that it turned token authentication on by default: worth reading for a `ray
#: start` cluster others can reach, nothing to act on for the embedded one, which lives and dies
#: with the driver (it appeared once per phase of the demo).
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


#: The embedded Ray's workers: Ray Data's INFO lines ("Dataset ... execution finished") and tqdm
#: bars ("Writing model shards", in a log that is not a terminal) say nothing the driver does not.
EMBEDDED_WORKER_ENV = {
    "RAY_DATA_LOG_LEVEL": "WARNING",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # torch's OpenMP threads sleep when idle instead of spinning: beside another busy process on
    # 2 cores a spinning 2-thread forward pass ran 10x slower (pipelines/__init__.py)
    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
}


def quiet_driver() -> None:
    """A command's own process: no tqdm bars from transformers ("Loading weights" each time a
    phase loads a model to evaluate it); the command prints its own progress lines."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # imported already: its switch was read at import
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def quiet_embedded_workers() -> None:
    """The embedded Ray's ``worker_process_setup_hook``: runs in each of its worker processes.
    Their console output is for what the driver does not say already."""
    logging.getLogger(PLACEMENT_GROUP_CLEANER_LOGGER).setLevel(logging.ERROR)
    # Ray Train's "Reporting training result N: TrainingReport(...)" at every checkpoint: its logger
    # is named after the module's file, so the run's LoggingConfig level does not reach it
    import ray

    context = os.path.join(
        os.path.dirname(ray.__file__), "train", "v2", "_internal", "execution", "context.py"
    )
    logging.getLogger(context).setLevel(logging.WARNING)
    # Ray Data's own use of its deprecated option (Ray 2.60, in Ray Train's DatasetManager)
    warnings.filterwarnings("ignore", message=r".*ExecutionOptions\.exclude_resources")


def ray_address_file() -> Path:
    """Where ``ray start`` records the last cluster's address (Ray's own rule for its temp dir)."""
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    elif sys.platform.startswith(("linux", "darwin")):
        base = "/tmp"
    else:  # pragma: no cover - Windows
        base = tempfile.gettempdir()
    return Path(base) / "ray" / "ray_current_cluster"


def forget_dead_ray_address(address_file: Path | None = None, *, timeout_s: float = 1.0) -> str | None:
    """Remove the address a ``ray start`` left behind when nothing listens there any more.

    Ray's processes fall back to that file when they look a cluster up without an address. Ray
    Train's PlacementGroupCleaner does, through the state API, from inside an embedded cluster
    too: with a file left by a head that was killed rather than stopped, each lookup waits 40 s
    for a GCS that is gone, and every ``TorchTrainer.fit`` ends with a 12 s stall and a
    ``GetTimeoutError`` traceback. ``ray stop`` removes the file; this does the same, but only
    when the port it names refuses connections. Returns the address it forgot, else None.

    >>> forget_dead_ray_address(Path("/nonexistent/ray_current_cluster")) is None
    True
    """
    path = address_file or ray_address_file()
    try:
        address = path.read_text().strip()
    except OSError:
        return None
    host, _, port = address.rpartition(":")
    if host and port.isdigit():
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return None  # a live cluster: not ours to forget
        except ConnectionRefusedError:
            pass
        except OSError:
            return None  # unreachable or slow is not proof that it is gone
    with contextlib.suppress(OSError):
        path.unlink()
        return address or "(empty)"
    return None


def total_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * GiB


def default_object_store_bytes() -> int:
    """30% of RAM (Ray's own default), capped at 4 GiB: enough for every phase on a laptop."""
    return int(min(0.3 * total_memory_bytes(), 4 * GiB))


def resolve_address(config: RaySection, flag: str | None = None) -> str | None:
    """``--address`` beats ``RAY_ADDRESS`` beats the config; ``None`` means embedded."""
    address = flag or os.environ.get("RAY_ADDRESS") or config.address
    if address and address.startswith(("http://", "https://")):
        raise ConfigError(
            f"ray address {address!r} is a dashboard/job-server URL (what `ray job submit` wants); to run on "
            "that cluster submit the job with `ray job submit --working-dir . -- python -m pipelines.<phase>`, "
            "or pass the cluster's GCS address (host:6379) or 'auto'"
        )
    return address or None


@contextlib.contextmanager
def ray_session(
    config: RaySection,
    address: str | None = None,
    *,
    quiet: bool = True,
    log: Callable[[str], None] | None = None,
) -> Iterator[RayInfo]:
    """Start or join Ray for the duration of the block; shuts down only what it started.
    ``log`` hears one line before a start or join that may take a while."""
    import ray  # cluster/ may import ray; chessrl/ never does

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        yield RayInfo(mode="existing", address=_gcs_address(ray), resources=dict(ray.cluster_resources()))
        return

    target = resolve_address(config, address)
    level = logging.WARNING if quiet else logging.INFO
    notes: list[str] = []
    if not target:
        logging.getLogger(TOKEN_AUTH_LOGGER).setLevel(logging.ERROR)
        forgotten = forget_dead_ray_address()
        if forgotten:
            notes.append(
                f"removed {ray_address_file()}: the `ray start` cluster it named ({forgotten}) is gone, "
                "and Ray Train would wait on it at the end of every run"
            )
    if log is not None:
        log(f"ray: joining the cluster at {target}" if target else "ray: starting an embedded local cluster")
    try:
        if target:
            context = ray.init(address=target, logging_level=level, configure_logging=True)
            mode = "joined"
        else:
            object_store = (
                int(config.object_store_gb * GiB) if config.object_store_gb else default_object_store_bytes()
            )
            context = ray.init(
                address="local",  # never silently join a `ray start` cluster found in /tmp/ray
                num_cpus=config.num_cpus or os.cpu_count(),
                num_gpus=config.num_gpus,
                object_store_memory=object_store,
                include_dashboard=config.dashboard,
                dashboard_host=config.dashboard_host,
                dashboard_port=config.dashboard_port,
                logging_level=level,
                configure_logging=True,
                # a copy: Ray writes the hook's key into env_vars, and a second embedded session in
                # this process would then find it there and send the function itself (a TypeError)
                runtime_env={
                    "worker_process_setup_hook": quiet_embedded_workers,
                    "env_vars": dict(EMBEDDED_WORKER_ENV),
                },
            )
            mode = "embedded"
    except ConnectionError as exc:
        raise UserError(f"cannot connect to the Ray cluster at {target!r}: {exc}") from None
    dashboard = getattr(context, "dashboard_url", None) or None
    info = RayInfo(
        mode=mode,
        address=_gcs_address(ray),
        resources=dict(ray.cluster_resources()),
        dashboard_url=f"http://{dashboard}" if dashboard and "://" not in dashboard else dashboard,
        notes=tuple(notes),
    )
    try:
        yield info
    finally:
        ray.shutdown()


def _gcs_address(ray_module: object) -> str:
    try:
        return str(ray_module.get_runtime_context().gcs_address)  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - older Ray
        return "unknown"


def release_actor_name(name: str, namespace: str | None, timeout_s: float = 30.0) -> None:
    """Kill a leftover actor of this name (an earlier invocation in the same Ray session, or one
    killed with its driver) and wait until the name is free."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            return
        ray.kill(actor)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray actor name {name!r} is still taken after {timeout_s:g} s")
        time.sleep(0.1)


def on_driver_node() -> object:
    """A scheduling strategy that pins an actor to the driver's node (hard affinity): for the
    zero-CPU actors a phase talks through (a progress queue, ppo's and selfplay's parameter
    servers, selfplay's replay queue). Ray may place a zero-CPU actor on any node, and an autoscaler counts a
    node whose actors hold no resources as idle and takes it away, with the actor on it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _node_sees(path: str) -> bool:
    """Ray task body: whether this node's filesystem has ``path``."""
    return os.path.exists(path)


def paths_other_nodes_cannot_read(
    paths: dict[str, str],
    written: Collection[str] = ("run.storage",),
    log: Callable[[str], None] | None = None,
) -> list[str]:
    """For each local path (``{config key: path}``) that some alive node of this cluster cannot
    read, one line naming the key, the path and the node; [] on a one-node cluster. A path the run
    writes (``written``: its storage) or one that does not exist yet is checked through a marker
    file written where it is (its nearest existing folder), then removed: a folder of the same
    name on each node's own disk is not shared storage. A glob is checked at its folder. One
    zero-CPU task a node and path, pinned to the node; a check that cannot finish (a node still
    setting up, a node gone) is a line in ``log``, not an error."""
    import uuid

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) < 2 or not paths:
        return []
    probe = ray.remote(num_cpus=0, max_retries=0)(_node_sees)
    markers: list[str] = []
    asked: dict[str, str] = {}
    for key, path in paths.items():
        if any(ch in path for ch in "*?["):  # a glob: its folder
            path = os.path.dirname(path[: min(path.index(ch) for ch in "*?[" if ch in path)]) or "/"
        if key in written or not os.path.exists(path):
            folder = path
            while folder and not os.path.isdir(folder):
                folder = os.path.dirname(folder.rstrip("/")) or "/"
            marker = os.path.join(folder, f".chess-rl-node-check-{uuid.uuid4().hex}")
            with contextlib.suppress(OSError):
                open(marker, "w").close()
                markers.append(marker)
                asked[key] = marker
                continue
        asked[key] = path
    try:
        refs = {
            (key, n["NodeID"], n.get("NodeManagerAddress", "?")): probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(where)
            for key, where in asked.items()
            for n in nodes
        }
        try:
            seen = dict(zip(refs, ray.get(list(refs.values()), timeout=600), strict=True))
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as exc:
            if log is not None:
                log(f"could not check that every node reads the local paths ({type(exc).__name__}); going on")
            return []
    finally:
        for marker in markers:
            with contextlib.suppress(OSError):
                os.remove(marker)
    out = []
    for (key, node, address), ok in seen.items():
        if not ok and not any(line.startswith(f"{key}:") for line in out):
            out.append(
                f"{key}: {paths[key]} is a local path that node {address} ({node[:8]}) of this {len(nodes)}-node "
                "cluster cannot read: put inputs and storage where every node reads them (s3://bucket/..., or a "
                "filesystem every node mounts; docs/cluster.md)"
            )
    return out
