"""The code's map holds: ``chessrl``'s packages import only the packages before them in
:data:`chessrl.LAYERS` and never ray, ``actors``, ``pipelines`` or ``cluster`` (but its Ray-free
``cluster.errors`` and ``cluster.storage``); each package's
docstring names its modules; no phase module imports another phase's, and no module of
``pipelines/learner/`` is a phase or imports one; the bench scripts, and ``chessrl``'s modules,
import each other without a cycle. Every import statement counts, including those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import chessrl

ROOT = Path(__file__).resolve().parents[2]
CHESSRL = ROOT / "chessrl"


def imported(path: Path) -> set[str]:
    """The absolute module names a file imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def packages() -> list[str]:
    return sorted(p.name for p in CHESSRL.iterdir() if (p / "__init__.py").is_file())


def test_the_packages_are_the_layers_and_the_top_level_stays_small() -> None:
    assert packages() == sorted(chessrl.LAYERS)
    top = [p for p in CHESSRL.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()]
    assert len(top) <= 10, sorted(p.name for p in top)
    assert [p.name for p in CHESSRL.glob("*.py")] == ["__init__.py"]


def test_each_package_imports_only_the_packages_before_it() -> None:
    wrong = []
    for package, allowed in chessrl.LAYERS.items():
        for path in sorted((CHESSRL / package).glob("*.py")):
            for name in imported(path):
                parts = name.split(".")
                if name.startswith(("cluster.errors", "cluster.storage")):
                    continue  # the error tree and storage URIs: Ray-free, every layer's
                if parts[0] in {"ray", "cluster", "actors", "pipelines", "bench"}:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
                elif (
                    parts[0] == "chessrl"
                    and len(parts) > 1
                    and parts[1] in chessrl.LAYERS
                    and parts[1] not in (package, *allowed)
                ):
                    wrong.append(f"{path.relative_to(ROOT)} imports {name} ({package} may import {allowed})")
    assert not wrong, "\n".join(wrong)


def test_each_package_docstring_names_its_modules_and_its_imports() -> None:
    for package in packages():
        doc = ast.get_docstring(ast.parse((CHESSRL / package / "__init__.py").read_text())) or ""
        for path in (CHESSRL / package).glob("*.py"):
            if path.name != "__init__.py":
                assert f"chessrl.{package}.{path.stem}" in doc, (
                    f"chessrl/{package}'s docstring misses {path.stem}"
                )
        assert "Imports:" in doc, f"chessrl/{package}'s docstring does not say what it may import"


def phase_modules() -> set[str]:
    """The ``pipelines`` modules that are phases: they define ``PHASE``, or drive the graph (rlaif)."""
    found = {"rlaif"}
    for path in (ROOT / "pipelines").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PHASE" for t in node.targets):
                found.add(path.stem)
    return found


def test_no_phase_module_imports_another_phase() -> None:
    phases = phase_modules()
    assert {"prepare", "sft", "reward", "ppo", "grpo", "selfplay", "evaluate"} <= phases
    allowed = {("tune", "rlaif")}  # tune drives phases through the graph's registry
    wrong = []
    for phase in sorted(phases):
        for name in imported(ROOT / "pipelines" / f"{phase}.py"):
            parts = name.split(".")
            other = parts[1] if parts[0] == "pipelines" and len(parts) > 1 else None
            if other in phases and other != phase and (phase, other) not in allowed:
                wrong.append(f"pipelines/{phase}.py imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_learner_module_is_or_imports_a_phase() -> None:
    """``pipelines/learner/`` holds the phases' learners and what they share: no module there is
    a phase (defines ``PHASE``) or imports one; what a learner needs of another phase lives in a
    helper module (``pipelines.learner.reward_model`` for ppo's critic)."""
    phases = phase_modules()
    wrong = []
    for path in sorted((ROOT / "pipelines" / "learner").glob("*.py")):
        rel = path.relative_to(ROOT)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PHASE" for t in node.targets):
                wrong.append(f"{rel} defines PHASE")
        for name in imported(path):
            parts = name.split(".")
            if parts[0] == "pipelines" and len(parts) > 1 and parts[1] in phases:
                wrong.append(f"{rel} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_bench_scripts_import_each_other_without_a_cycle() -> None:
    scripts = {p.stem: p for p in (ROOT / "bench").glob("*.py")}

    def targets(name: str) -> set[str]:  # ``bench.rl_step`` or, run as a script, ``rl_step``
        parts = name.split(".")
        return {parts[1] if parts[0] == "bench" and len(parts) > 1 else parts[0]} & set(scripts)

    edges = {s: set().union(*map(targets, imported(p))) - {s} for s, p in scripts.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            assert state.get(nxt) != 1, f"bench import cycle: {' -> '.join([*path, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for script in sorted(scripts):
        if script not in state:
            visit(script, [])


def test_chessrl_modules_import_each_other_without_a_cycle() -> None:
    """A module may lean on another of its package only one way (``chessrl.lm.models`` reads
    configs through ``checkpoints``; both share ``chessrl.lm.gelu``, which imports neither)."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in CHESSRL.rglob("*.py")}
    modules = {name.removesuffix(".__init__"): path for name, path in modules.items()}
    edges = {
        module: {name for name in imported(path) if name in modules and name != module}
        - {module.rsplit(".", 1)[0], "chessrl"}  # a module's own package (its docstring, LAYERS) is no circle
        for module, path in modules.items()
    }
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join([*path, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module, [])


def test_pipelines_shows_the_commands_and_each_ones_helpers_beside_it() -> None:
    """``pipelines/``'s top level is the commands (the phases, ``rlaif``, ``uci``), each command's
    helpers named ``<command>_<what>``, and ``cli``; the package docstring names every one."""
    import pipelines

    commands = phase_modules() | {"rlaif", "uci"}
    top = {path.stem for path in (ROOT / "pipelines").glob("*.py")} - {"__init__", "cli"}
    strays = {m for m in top - commands if not any(m.startswith(f"{c}_") for c in commands)}
    assert not strays, f"pipelines/ modules that are neither a command nor a command's helper: {strays}"
    unnamed = {m for m in top if f"``{m}``" not in (pipelines.__doc__ or "")}
    assert not unnamed, f"pipelines/__init__.py's docstring does not name {unnamed}"
