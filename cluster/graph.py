"""A resumable job graph: nodes with inputs, a key per node, atomic manifests, and the plan of
what to run. Ray-free and chess-free: ``pipelines/rlaif.py`` runs the phases this plans.

A node's key is a hash of its own config and its inputs' keys, so a change anywhere upstream
changes every key below it. A node whose manifest (``<root>/<node>.json``) holds its current key
is done and skipped; anything else runs (and resumes inside itself from its own checkpoints).

>>> g = Graph([Node("prepare"), Node("sft", ("prepare",)), Node("grpo", ("sft", "prepare"))])
>>> g.order()
['prepare', 'sft', 'grpo']
>>> keys = g.keys({"prepare": {"n": 1}, "sft": {"steps": 10}, "grpo": {"beta": 0.1}})
>>> keys2 = g.keys({"prepare": {"n": 1}, "sft": {"steps": 20}, "grpo": {"beta": 0.1}})
>>> [keys[n] == keys2[n] for n in g.order()]
[True, False, False]
>>> g.select(only=["sft"]), g.select(start="sft"), g.select(start="sft", only=["grpo"])
(['sft'], ['sft', 'grpo'], ['grpo'])
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cluster.errors import ConfigError
from cluster.storage import Storage

#: A node's state in the table the graph prints.
STATES = ("pending", "running", "done", "skipped", "failed", "blocked", "not selected")


@dataclass(frozen=True)
class Node:
    """One step of the graph and the steps whose outputs it reads."""

    name: str
    needs: tuple[str, ...] = ()


class Graph:
    """Nodes in a fixed order; :meth:`check` (run by the constructor) refuses an unknown input
    and a cycle with one message that names them."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = {n.name: n for n in nodes}
        if len(self.nodes) != len(nodes):
            names = [n.name for n in nodes]
            raise ConfigError(
                f"graph: node {sorted({x for x in names if names.count(x) > 1})[0]!r} is declared twice"
            )
        self._order = self.check()

    def check(self) -> list[str]:
        """A topological order (declaration order among ready nodes); a ConfigError for an input
        that is no node or for a cycle.

        >>> Graph([Node("a", ("b",)), Node("b", ("a",))])
        Traceback (most recent call last):
        ...
        cluster.errors.ConfigError: graph: a cycle: a -> b -> a
        >>> Graph([Node("a", ("z",))])
        Traceback (most recent call last):
        ...
        cluster.errors.ConfigError: graph: node 'a' needs 'z', which is not a node (nodes: a)
        """
        for node in self.nodes.values():
            for need in node.needs:
                if need not in self.nodes:
                    raise ConfigError(
                        f"graph: node {node.name!r} needs {need!r}, which is not a node (nodes: {', '.join(self.nodes)})"
                    )
        order: list[str] = []
        done: set[str] = set()
        while len(order) < len(self.nodes):
            ready = [n for n in self.nodes if n not in done and all(x in done for x in self.nodes[n].needs)]
            if not ready:
                raise ConfigError(f"graph: a cycle: {' -> '.join(self._cycle(done))}")
            order.append(ready[0])
            done.add(ready[0])
        return order

    def _cycle(self, done: set[str]) -> list[str]:
        start = next(n for n in self.nodes if n not in done)
        path: list[str] = [start]
        while True:
            nxt = next(x for x in self.nodes[path[-1]].needs if x not in done)
            if nxt in path:
                return path[path.index(nxt) :] + [nxt]
            path.append(nxt)

    def order(self) -> list[str]:
        return list(self._order)

    def upstream(self, name: str) -> set[str]:
        """Every node ``name`` reads from, directly or not."""
        out: set[str] = set()
        todo = list(self.nodes[name].needs)
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                todo.extend(self.nodes[n].needs)
        return out

    def downstream(self, name: str) -> set[str]:
        """Every node that reads from ``name``, directly or not."""
        return {n for n in self.nodes if name in self.upstream(n)}

    def select(self, only: Iterable[str] | None = None, start: str | None = None) -> list[str]:
        """The nodes to consider, in order: ``only`` these, or ``start`` and everything below it
        (both: the intersection); an unknown name is one ConfigError listing the nodes."""
        for name in [*(only or []), *([start] if start else [])]:
            if name not in self.nodes:
                raise ConfigError(f"rlaif: unknown phase {name!r}; phases: {', '.join(self._order)}")
        chosen = set(self._order)
        if only:
            chosen &= set(only)
        if start:
            chosen &= {start} | self.downstream(start)
        return [n for n in self._order if n in chosen]

    def keys(self, configs: Mapping[str, Any]) -> dict[str, str]:
        """Each node's key: sha256 of its config (canonical JSON) and its inputs' keys."""
        out: dict[str, str] = {}
        for name in self._order:
            payload = {
                "node": name,
                "config": configs.get(name),
                "inputs": {n: out[n] for n in self.nodes[name].needs},
            }
            text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
            out[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return out

    def mermaid(self, states: Mapping[str, str]) -> str:
        """The graph as mermaid text, each node labelled with its state and styled by it."""
        colours = {
            "done": "#b7e1a1",
            "skipped": "#d9ead3",
            "running": "#ffe599",
            "failed": "#f4a6a6",
            "blocked": "#e6e6e6",
            "pending": "#ffffff",
            "not selected": "#f3f3f3",
        }
        lines = ["graph LR"]
        for name in self._order:
            lines.append(f'  {name}["{name}<br/>{states.get(name, "pending")}"]')
        for name in self._order:
            for need in self.nodes[name].needs:
                lines.append(f"  {need} --> {name}")
        for name in self._order:
            lines.append(f"  style {name} fill:{colours.get(states.get(name, 'pending'), '#ffffff')}")
        return "\n".join(lines) + "\n"


@dataclass
class Manifest:
    """What a finished node leaves: its key, when and how long, and its summary."""

    node: str
    key: str
    seconds: float
    finished: float = field(default_factory=time.time)
    summary: dict[str, Any] = field(default_factory=dict)


class Manifests:
    """``<root>/<node>.json``, written atomically (a reader sees the old manifest or the new one)."""

    def __init__(self, root: Storage) -> None:
        self.root = root

    def read(self, node: str) -> Manifest | None:
        if not self.root.exists(f"{node}.json"):
            return None
        try:
            return Manifest(**json.loads(self.root.read_text(f"{node}.json")))
        except (ValueError, TypeError):  # unreadable: the node runs again and rewrites it
            return None

    def write(self, manifest: Manifest) -> None:
        self.root.write_text(
            f"{manifest.node}.json", json.dumps(asdict(manifest), indent=1, sort_keys=True, default=str)
        )

    def is_done(self, node: str, key: str) -> bool:
        found = self.read(node)
        return found is not None and found.key == key

    def delete(self, node: str) -> None:
        if self.root.exists(f"{node}.json"):
            self.root.delete(f"{node}.json")

    def mark_started(self, node: str, key: str) -> None:
        """``<node>.started.json``: the key a node last started with (until it finishes)."""
        self.root.write_text(f"{node}.started.json", json.dumps({"node": node, "key": key}))

    def started_key(self, node: str) -> str | None:
        """The key of a started, unfinished run of ``node``, or None."""
        if not self.root.exists(f"{node}.started.json"):
            return None
        try:
            return str(json.loads(self.root.read_text(f"{node}.started.json"))["key"])
        except (ValueError, KeyError, TypeError):
            return ""  # unreadable: not this key

    def clear_started(self, node: str) -> None:
        if self.root.exists(f"{node}.started.json"):
            self.root.delete(f"{node}.started.json")


def state_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The graph's state as aligned lines: phase, state, seconds, key, note.

    >>> print("\\n".join(state_table([{"node": "sft", "state": "done", "seconds": 12.3, "key": "ab12", "note": ""}])))
    phase  state  time     key   note
    sft    done   12 s     ab12
    """
    header = ("phase", "state", "time", "key", "note")
    body = [
        (
            str(r["node"]),
            str(r["state"]),
            f"{r['seconds']:.0f} s" if r.get("seconds") is not None else "-",
            str(r.get("key", "")),
            str(r.get("note", "")),
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    widths[2] = max(widths[2], 7)
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]
    ]
