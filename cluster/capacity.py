"""What a Ray cluster can hold, and asking its autoscaler for what is not up yet.

A phase sizes its pieces (engine actors, learner workers) from the nodes the cluster has *and*
the node types its autoscaler can start, asks for what is not up yet, and refuses in one line
only what no node type can ever hold. On a cluster without an autoscaler (a laptop's embedded
Ray, `ray start` nodes) everything is as before: the nodes alive now are all there is.

    cap = read_capacity()          # the alive nodes, and the autoscaler's node types if it has one
    cap.describe()                 # "1 node(s) alive (CPU 0); its autoscaler (<config>) starts up to small ×2 (CPU 1), ..."
    default, most = sizing_cpus()  # CPUs to size a phase to by default, and the most it may ask for
    ensure([{"CPU": 2}], what="prepare.engines 2", log=print)   # returns once a node holds it

Where the node types come from: the autoscaler's own config, the ``--autoscaling-config`` of this
cluster's monitor process on the head node (``~/ray_bootstrap_config.yaml`` on a ``ray up``
cluster, autoscaler v1 or v2; the YAML given to ``ray start --head --autoscaling-config`` on a
local or fake one). Ray 2.60 keeps no node types in the GCS for such clusters
(``ray._private.state.state.get_cluster_config()`` is empty: only KubeRay-style deployments report
one), so the config is read where the monitor runs: on this machine when the driver runs on the
head (``ray job submit``), else by a zero-CPU task pinned to the head. An autoscaler out of reach
of both (KubeRay's sidecar container) is a cluster without one here: alive nodes only.

How the ask is made: a placement group of the bundles (``SPREAD``) that waits. The autoscaler
sees a pending placement group as demand and starts nodes for it; the driver prints a line every
``every_s`` seconds while they start, removes the group once placed, and the phase then starts
its actors or workers on those nodes (the autoscaler's idle timeout, minutes on a real cluster,
keeps them meanwhile). Unlike ``ray.autoscaler.sdk.request_resources``, whose request outlives a
killed driver and would keep the nodes up forever, a placement group goes with its job.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cluster.errors import ConfigError, UserError

Resources = Mapping[str, float]

#: How long :func:`ensure` waits for nodes before one line and exit 2: a cloud GPU node can take
#: ten minutes to boot; much longer than that is a quota or a failed launch.
NODE_WAIT_S = 1800.0
#: Resources every node reports that no phase asks for by name.
_BOOKKEEPING = ("memory", "object_store_memory")
#: How the resources of a type or a node are written in a line, in this order.
_ORDER = ("CPU", "GPU")
_EPS = 1e-9


def shape(resources: Resources) -> dict[str, float]:
    """A node's or a bundle's resources without Ray's bookkeeping (``node:<ip>``, memory).

    >>> shape({"CPU": 2.0, "node:10.0.0.1": 1.0, "memory": 8e9, "accel": 1.0})
    {'CPU': 2.0, 'accel': 1.0}
    """
    return {k: float(v) for k, v in resources.items() if not k.startswith("node:") and k not in _BOOKKEEPING}


def fits(bundle: Resources, node: Resources) -> bool:
    """Whether ``node`` holds ``bundle``.

    >>> fits({"CPU": 2}, {"CPU": 2, "accel": 1}), fits({"GPU": 1}, {"CPU": 8})
    (True, False)
    """
    return all(float(node.get(k, 0)) + _EPS >= v for k, v in bundle.items() if v > 0)


def written(resources: Resources) -> str:
    """Resources as a line says them: CPUs, GPUs, then the rest by name.

    >>> written({"accel": 1.0, "CPU": 2.0, "node:1.2.3.4": 1.0}), written({})
    ('CPU 2, accel 1', 'nothing')
    """
    items = shape(resources)
    keys = [k for k in _ORDER if k in items] + sorted(k for k in items if k not in _ORDER)
    return ", ".join(f"{k} {items[k]:g}" for k in keys if items[k]) or "nothing"


@dataclass(frozen=True)
class NodeType:
    """A worker node type of the autoscaler's config (``available_node_types``)."""

    name: str
    resources: Resources
    min_workers: int = 0
    max_workers: int = 0

    @property
    def has_gpu(self) -> bool:
        return float(self.resources.get("GPU", 0)) > 0


def parse_autoscaling_config(config: Mapping) -> tuple[tuple[NodeType, ...], int | None]:
    """The worker node types of an autoscaling config (the head's type left out: its node is alive
    whenever anything runs) and the cluster's cap on worker nodes (None when it sets none).
    A type without ``resources`` holds nothing a phase can ask for.

    >>> types, cap = parse_autoscaling_config({
    ...     "max_workers": 3, "head_node_type": "head",
    ...     "available_node_types": {"head": {"resources": {"CPU": 0}},
    ...                              "cpu": {"resources": {"CPU": 4}, "max_workers": 2}}})
    >>> [(t.name, dict(t.resources), t.max_workers) for t in types], cap
    ([('cpu', {'CPU': 4.0}, 2)], 3)
    """
    cap = config.get("max_workers")
    cap = int(cap) if cap is not None else None
    head = config.get("head_node_type")
    types = []
    for name, spec in (config.get("available_node_types") or {}).items():
        if name == head or not isinstance(spec, Mapping):
            continue
        most = spec.get("max_workers", cap if cap is not None else 0)
        types.append(
            NodeType(
                name=str(name),
                resources=shape(spec.get("resources") or {}),
                min_workers=int(spec.get("min_workers", 0) or 0),
                max_workers=int(most or 0),
            )
        )
    return tuple(types), cap


@dataclass(frozen=True)
class Capacity:
    """The nodes alive now (each one's total resources, the head's ``node:__internal_head__``
    among them) and the node types the cluster's autoscaler can start (none: no autoscaler)."""

    alive: tuple[Resources, ...] = ()
    types: tuple[NodeType, ...] = ()
    max_workers: int | None = None  # the autoscaler's cap on worker nodes
    source: str = ""  # where the node types were read

    @property
    def autoscales(self) -> bool:
        """Whether an autoscaler can start nodes of some type."""
        return any(t.max_workers > 0 for t in self.types)

    def launchable(self) -> list[NodeType]:
        """The nodes the autoscaler can still start, one entry a node: each type up to its
        ``max_workers`` less the alive nodes of its shape, all of them up to the cluster's
        ``max_workers`` less the alive worker nodes; the most CPUs first, types with a GPU
        after those without (CPU work should not take a GPU node).

        >>> cap = Capacity(alive=({"CPU": 1},), types=(NodeType("s", {"CPU": 1}, 0, 2),
        ...                NodeType("g", {"CPU": 8, "GPU": 1}, 0, 1), NodeType("b", {"CPU": 2}, 0, 1)))
        >>> [t.name for t in cap.launchable()]
        ['b', 's', 'g']
        """
        nodes = sorted(self._startable(), key=lambda t: (t.has_gpu, -float(t.resources.get("CPU", 0))))
        return nodes[: self._room_for_workers()]

    def _startable(self) -> list[NodeType]:
        """Each type as many times as it may still start, the cluster's cap aside."""
        running = Counter(tuple(sorted(shape(n).items())) for n in self.alive if not _is_head(n))
        nodes: list[NodeType] = []
        for t in self.types:
            key = tuple(sorted(shape(t.resources).items()))
            taken = min(running[key], t.max_workers)
            running[key] -= taken
            nodes += [t] * (t.max_workers - taken)
        return nodes

    def _room_for_workers(self) -> int:
        """How many more worker nodes the autoscaler's cap allows (no cap: as many as there are)."""
        if self.max_workers is None:
            return sys.maxsize
        return max(0, self.max_workers - sum(1 for n in self.alive if not _is_head(n)))

    def _nodes(self, beside: str | None = None) -> list[Resources]:
        """The alive nodes' and the startable node types' resources (those with ``beside``)."""
        nodes = [shape(n) for n in self.alive] + [t.resources for t in self.types if t.max_workers > 0]
        return [n for n in nodes if beside is None or float(n.get(beside, 0)) > 0]

    def largest(self, resource: str = "CPU", beside: str | None = None) -> float:
        """The most of ``resource`` one node has or can have (no single actor can ask for more);
        with ``beside``, among the nodes that have some of that too (a GPU worker's CPUs).

        >>> cap = Capacity(alive=({"CPU": 0},), types=(NodeType("b", {"CPU": 32}, 0, 1), NodeType("g", {"CPU": 8, "GPU": 1}, 0, 1)))
        >>> cap.largest(), cap.largest("CPU", beside="GPU")
        (32.0, 8.0)
        """
        return max((float(n.get(resource, 0)) for n in self._nodes(beside)), default=0.0)

    def cpus_per_gpu(self) -> int | None:
        """The CPUs that come with each GPU on every node that has GPUs, alive or of a type the
        autoscaler starts: each one's CPUs over its GPUs, the fewest of them (a worker of a GPU and
        that many CPUs fits beside its node's other GPUs' workers on any of them); None when no
        node or node type has a GPU.

        >>> g5, p4d = NodeType("g5", {"CPU": 8, "GPU": 1}, 0, 4), NodeType("p4d", {"CPU": 96, "GPU": 8}, 0, 1)
        >>> Capacity(alive=({"CPU": 0},), types=(NodeType("c", {"CPU": 32}, 0, 8), g5, p4d)).cpus_per_gpu()
        8
        >>> Capacity(alive=({"CPU": 16, "GPU": 1},)).cpus_per_gpu(), Capacity(alive=({"CPU": 16},)).cpus_per_gpu()
        (16, None)
        """
        shares = [float(n.get("CPU", 0)) / float(n["GPU"]) for n in self._nodes(beside="GPU")]
        return max(1, int(min(shares) + _EPS)) if shares else None

    def worker_cpus(self, workers: int, use_gpu: bool = False) -> int:
        """The CPUs of each of a learner's ``workers`` when its section does not say: with
        ``use_gpu``, the CPUs a GPU comes with (:meth:`cpus_per_gpu`: 8 on a g5.2xlarge-like type
        of 8 CPUs and 1 GPU, whatever the CPU nodes hold); else the CPUs a phase sizes itself to
        (:meth:`sizing`) split among them, no more than the largest node has; at least 1.

        >>> cap = Capacity(alive=({"CPU": 0, "node:__internal_head__": 1},),
        ...                types=(NodeType("c", {"CPU": 32}, 0, 8), NodeType("g5", {"CPU": 8, "GPU": 1}, 0, 4)))
        >>> cap.worker_cpus(4, use_gpu=True), cap.worker_cpus(4), cap.worker_cpus(1)
        (8, 8, 32)
        """
        share = self.cpus_per_gpu() if use_gpu else None
        if share is not None:
            return share
        return max(1, min(self.sizing()[0] // max(1, workers), int(self.largest("CPU") + _EPS)))

    def sizing(self) -> tuple[int, int]:
        """(the CPUs a phase sizes itself to when not told, the most CPUs it may ask for at once):
        with an autoscaler, :meth:`default_cpus` and :meth:`most`; without one, the alive
        nodes' CPUs twice (at least 1).

        >>> Capacity(alive=({"CPU": 0},), types=(NodeType("s", {"CPU": 1}, 0, 2), NodeType("b", {"CPU": 2}, 0, 1))).sizing()
        (2, 4)
        >>> Capacity(alive=({"CPU": 3},)).sizing()
        (3, 3)
        """
        if not self.autoscales:
            now = max(1, int(sum(float(n.get("CPU", 0)) for n in self.alive) + _EPS))
            return now, now
        return self.default_cpus(), max(self.default_cpus(), int(self.most("CPU") + _EPS))

    def most(self, resource: str = "CPU") -> float:
        """The most of ``resource`` the cluster can hold at once: the alive nodes' and the
        launchable nodes' with the most of it (as many as the autoscaler's cap allows).

        >>> head = {"CPU": 1, "node:__internal_head__": 1}
        >>> Capacity(alive=(head,), types=(NodeType("b", {"CPU": 2}, 0, 2),), max_workers=1).most()
        3.0
        """
        have = sum(float(n.get(resource, 0)) for n in self.alive)
        extra = sorted((float(t.resources.get(resource, 0)) for t in self._startable()), reverse=True)
        return have + sum(extra[: self._room_for_workers()])

    def default_cpus(self) -> int:
        """The CPUs a phase sizes itself to when not told (one engine a CPU): the alive nodes'; on a
        cluster whose alive nodes have none (scaling from zero), the CPUs of the first node the
        autoscaler would start for CPU work (:meth:`launchable`); at least 1.

        >>> Capacity(alive=({"CPU": 0},), types=(NodeType("s", {"CPU": 1}, 0, 2), NodeType("b", {"CPU": 2}, 0, 1))).default_cpus()
        2
        """
        now = sum(float(n.get("CPU", 0)) for n in self.alive)
        if now < 1 and self.autoscales:
            first = next(iter(self.launchable()), None)
            now = float(first.resources.get("CPU", 0)) if first is not None else now
        return max(1, int(now + _EPS))

    def engine_nodes(self, engines: int, cpus_per_engine: float = 1.0) -> list[float]:
        """The CPUs of each node to spread ``engines`` over: the alive nodes with CPUs, then the
        fewest launchable nodes (:meth:`launchable`'s order) that make room for them all; every
        launchable one when even that is not enough (the split then says how many fit).

        >>> cap = Capacity(alive=({"CPU": 0},), types=(NodeType("s", {"CPU": 1}, 0, 2), NodeType("b", {"CPU": 2}, 0, 1)))
        >>> cap.engine_nodes(2), cap.engine_nodes(3), cap.engine_nodes(9)
        ([2.0], [2.0, 1.0], [2.0, 1.0, 1.0])
        """
        cpus = [float(n.get("CPU", 0)) for n in self.alive if float(n.get("CPU", 0)) > 0]

        def room() -> int:
            return sum(int(c / cpus_per_engine + _EPS) for c in cpus)

        for node in self.launchable():
            if room() >= engines:
                break
            if float(node.resources.get("CPU", 0)) >= cpus_per_engine:
                cpus.append(float(node.resources["CPU"]))
        return cpus

    def cannot_hold(self, bundles: Sequence[Resources], what: str) -> str | None:
        """Why no set of nodes of this cluster can ever hold ``bundles`` at once (one line naming
        ``what``), or None when some can: a bundle larger than every node and node type, or more
        of a resource in all than the cluster can hold.

        >>> cap = Capacity(alive=({"CPU": 0},), types=(NodeType("b", {"CPU": 2}, 0, 1),), source="c.yaml")
        >>> print(cap.cannot_hold([{"CPU": 3}], "sft's 1 learner worker(s)"))
        sft's 1 learner worker(s): one asks for CPU 3, which no node of this cluster has, nor any node type its autoscaler starts (1 node(s) alive (CPU 0); its autoscaler (c.yaml) starts up to b ×1 (CPU 2))
        >>> cap.cannot_hold([{"CPU": 1}, {"CPU": 1}], "x") is None
        True
        """
        for bundle in {tuple(sorted(shape(b).items())): shape(b) for b in bundles}.values():
            nodes = list(self.alive) + [t.resources for t in self.types if t.max_workers > 0]
            if not any(fits(bundle, n) for n in nodes):
                where = ", nor any node type its autoscaler starts" if self.types else ""
                return f"{what}: one asks for {written(bundle)}, which no node of this cluster has{where} ({self.describe()})"
        asked: Counter[str] = Counter()
        for b in bundles:
            asked.update(shape(b))
        for resource, amount in asked.items():
            if amount > self.most(resource) + _EPS:
                return (
                    f"{what}: {amount:g} {resource} in all, but this cluster can hold at most "
                    f"{self.most(resource):g} ({self.describe()})"
                )
        return None

    def describe(self) -> str:
        """The alive nodes and what the autoscaler can start, in a few words.

        >>> Capacity(alive=({"CPU": 0},), types=(NodeType("s", {"CPU": 1}, 0, 2),), source="c.yaml").describe()
        '1 node(s) alive (CPU 0); its autoscaler (c.yaml) starts up to s ×2 (CPU 1)'
        """
        total: Counter[str] = Counter({"CPU": 0})
        for n in self.alive:
            total.update(shape(n))
        line = f"{len(self.alive)} node(s) alive ({written(total) if any(total.values()) else 'CPU 0'})"
        if self.types:
            kinds = ", ".join(f"{t.name} ×{t.max_workers} ({written(t.resources)})" for t in self.types)
            line += f"; its autoscaler ({self.source}) starts up to {kinds}"
        return line


def _is_head(node: Resources) -> bool:
    return "node:__internal_head__" in node


def holds_now(bundles: Sequence[Resources], nodes: Sequence[Resources]) -> bool:
    """Whether ``nodes`` (their free resources) hold every bundle at once: the largest bundle
    first, each on the first node with room (a quick check, not an optimal packing).

    >>> holds_now([{"CPU": 2}, {"CPU": 1}], [{"CPU": 1}, {"CPU": 2}]), holds_now([{"CPU": 2}], [{"CPU": 1}] * 2)
    (True, False)
    """
    free = [dict(shape(n)) for n in nodes]
    for bundle in sorted((shape(b) for b in bundles), key=lambda b: -sum(b.values())):
        node = next((f for f in free if fits(bundle, f)), None)
        if node is None:
            return False
        for k, v in bundle.items():
            node[k] = node.get(k, 0.0) - v
    return True


# -- reading the cluster (Ray) -------------------------------------------------------------------

#: The autoscaler's entry points (v1 and v2), as the monitor process's command line names them.
_MONITORS = ("autoscaler/_private/monitor.py", "autoscaler/v2/monitor.py")


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value of ``name=value`` in a command line, or None."""
    return next((a.split("=", 1)[1] for a in args if a.startswith(name + "=")), None)


def autoscaler_config_path(gcs_port: str, proc: str = "/proc") -> str | None:
    """The ``--autoscaling-config`` of the autoscaler (the monitor process) of the cluster whose
    GCS listens on ``gcs_port``, among this machine's processes in this network namespace (two
    clusters on one machine differ in one or the other); None when it runs on another machine or
    was started without one (a plain ``ray start`` cluster's monitor only watches)."""
    try:
        own = os.readlink(f"{proc}/self/ns/net")
    except OSError:
        own = None
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        try:
            with open(f"{proc}/{pid}/cmdline", "rb") as handle:
                args = handle.read().decode(errors="replace").split("\0")
            if not any(a.endswith(_MONITORS) for a in args[:4]):
                continue
            if (_flag(args, "--gcs-address") or "").rsplit(":", 1)[-1] != gcs_port:
                continue
            if own is not None and os.readlink(f"{proc}/{pid}/ns/net") != own:
                continue
        except OSError:  # gone meanwhile, or not ours to read
            continue
        config = _flag(args, "--autoscaling-config")
        return os.path.expanduser(config) if config else None
    return None


def node_types_here(gcs_address: str) -> tuple[tuple[NodeType, ...], int | None, str] | None:
    """The worker node types, the cap on worker nodes and the path of the config of the
    autoscaler of the cluster at ``gcs_address``, read on this machine; None when its autoscaler
    is not here or has no config (the body of the task that reads them on the head)."""
    import yaml

    path = autoscaler_config_path(gcs_address.rsplit(":", 1)[-1])
    if path is None:
        return None
    try:
        with open(path) as handle:
            config = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError):
        return None
    types, cap = parse_autoscaling_config(config if isinstance(config, Mapping) else {})
    return types, cap, path


@functools.lru_cache(maxsize=8)
def _node_types(gcs_address: str, head: str | None) -> tuple[tuple[NodeType, ...], int | None, str]:
    """:func:`node_types_here`, here (``head`` None: this is the head node) or by a zero-CPU task
    pinned to the head node; read once a cluster and process."""
    found = None
    if head is None:
        found = node_types_here(gcs_address)
    else:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = ray.remote(num_cpus=0, max_retries=0)(node_types_here)
        try:
            found = ray.get(
                task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote(
                    gcs_address
                ),
                timeout=120,
            )
        except Exception:  # the head unreachable: the alive nodes are all we know
            found = None
    return found if found is not None else ((), None, "")


def read_capacity() -> Capacity:
    """The alive nodes of the cluster this process is connected to, and the node types its
    autoscaler can start (:func:`node_types_here`)."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    context = ray.get_runtime_context()
    head = next((n["NodeID"] for n in nodes if "node:__internal_head__" in n.get("Resources", {})), None)
    types, cap, source = _node_types(
        context.gcs_address, None if head in (None, context.get_node_id()) else head
    )
    return Capacity(
        alive=tuple(dict(n.get("Resources", {})) for n in nodes), types=types, max_workers=cap, source=source
    )


def sizing_cpus(seen: int = 1) -> tuple[int, int]:
    """(the CPUs a phase sizes itself to when not told, the most CPUs it may ask for at once) of the
    cluster this process is connected to (:meth:`Capacity.sizing`); outside a Ray session,
    ``seen`` (the caller's own count) twice.
    """
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return seen, seen
    return read_capacity().sizing()


# -- asking for nodes (Ray) ----------------------------------------------------------------------


def ensure(
    bundles: Sequence[Resources],
    *,
    what: str,
    log: Callable[[str], None] | None = None,
    timeout_s: float = NODE_WAIT_S,
    every_s: float = 15.0,
    capacity: Capacity | None = None,
) -> None:
    """Return once this cluster can hold ``bundles`` (one actor or worker each) at once:

    - no set of its nodes can ever hold them (a bundle larger than every node and node type, or
      more in all than they hold together): one :class:`~cluster.errors.ConfigError` line naming
      ``what``;
    - no autoscaler, or the alive nodes' free resources hold them: at once;
    - else it asks the autoscaler (a placement group of the bundles that waits, removed before
      returning), with a line in ``log`` when asking, one 2 s later and then every ``every_s``
      seconds while nodes start (what the autoscaler says it is starting), and one when they are
      up. No room after ``timeout_s``: one :class:`~cluster.errors.UserError` line.

        ensure([{"CPU": 2, "GPU": 1}] * 2, what="sft's 2 learner worker(s)", log=context.log)
    """
    cap = capacity or read_capacity()
    problem = cap.cannot_hold(bundles, what)
    if problem:
        raise ConfigError(problem)
    asked = [b for b in ({k: float(v) for k, v in shape(b).items() if v > 0} for b in bundles) if b]
    if not cap.autoscales or not asked:
        return
    try:
        from ray._private.state import available_resources_per_node

        free = list(available_resources_per_node().values())
    except Exception:  # a Ray without it: the alive nodes' totals
        free = list(cap.alive)
    if holds_now(asked, free):
        return
    _wait_for_nodes(asked, what, log or (lambda line: print(line, flush=True)), timeout_s, every_s, cap)


def _wait_for_nodes(
    bundles: Sequence[Resources],
    what: str,
    log: Callable[[str], None],
    timeout_s: float,
    every_s: float,
    cap: Capacity,
) -> None:
    """:func:`ensure`'s placement group that waits, and its progress lines."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from cluster.progress import clock

    asked = [dict(b) for b in bundles]
    kinds = Counter(written(b) for b in asked)
    line = ", ".join(f"{n} × {kind}" for kind, n in kinds.items())
    log(f"{what}: asking the autoscaler for {line}; {cap.describe()}")
    started = time.monotonic()
    group = placement_group(asked, strategy="SPREAD")
    waits = itertools.chain([min(2.0, every_s)], itertools.repeat(every_s))  # the first line soon
    try:
        while not group.wait(timeout_seconds=next(waits)):
            waited = time.monotonic() - started
            alive = Capacity(alive=tuple(n["Resources"] for n in ray.nodes() if n.get("Alive"))).describe()
            if waited > timeout_s:
                raise UserError(
                    f"{what}: no room for {line} after {clock(waited)} of waiting for the autoscaler ({alive}): "
                    "`ray status` on the head says why (a cloud quota, a launch that failed); run the same "
                    "command again once the nodes are up"
                )
            starting = _starting_nodes()
            log(
                f"{what}: waiting for nodes, {clock(waited)}: "
                + (f"starting {starting}; " if starting else "")
                + alive
            )
        alive = Capacity(alive=tuple(n["Resources"] for n in ray.nodes() if n.get("Alive"))).describe()
        log(f"{what}: room after {clock(time.monotonic() - started)}: {alive}")
    finally:
        remove_placement_group(group)


def _starting_nodes() -> str:
    """What the autoscaler says it is starting (``big ×1``), from its v1 status in the GCS or its
    v2 cluster status; '' when it says nothing (best effort: this is a progress line)."""
    try:
        import ray
        import ray._private.ray_constants as ray_constants
        from ray.experimental.internal_kv import _internal_kv_get

        counts: Counter[str] = Counter()
        raw = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
        if raw:  # autoscaler v1
            report = json.loads(raw).get("autoscaler_report") or {}
            counts.update(report.get("pending_launches") or {})
            counts.update(node[1] for node in report.get("pending_nodes") or [])
        else:  # autoscaler v2
            from ray.autoscaler.v2.sdk import get_cluster_status

            status = get_cluster_status(ray.get_runtime_context().gcs_address)
            for launch in status.pending_launches:
                counts[launch.ray_node_type_name] += launch.count
            counts.update(node.ray_node_type_name for node in status.pending_nodes)
    except Exception:
        return ""
    return ", ".join(f"{kind} ×{n}" for kind, n in sorted(counts.items()) if n)
