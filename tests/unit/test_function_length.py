"""No module of the project's code is over :data:`MAX_MODULE_LINES` lines, none opts out of the
formatter (``ruff format --check`` runs in ``make lint``: an opt-out would let a line be packed past
what the formatter writes), and no function is over :data:`MAX_LINES` lines (its ``def`` line to its
last, docstring included) in the project's code, except those on :data:`ALLOWED`, today's offenders waiting to be split. An
entry leaves the list when its function is split (a test fails while it stays), so the list can
only shrink; a new long function is split into named steps instead of joining it.

>>> source = "def f():\\n" + "    x = 1\\n" * 80 + "\\n\\nclass C:\\n    def g(self):\\n        pass\\n"
>>> long_functions(ast.parse(source), "m.py", max_lines=80)
{'m.py::f': 81}
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The folders whose functions are measured.
FOLDERS = ("chessrl", "pipelines", "actors", "cluster", "bench")
MAX_LINES = 80
MAX_MODULE_LINES = 600
#: The formatter's opt-out comments, spelled so this file does not hold them.
OPT_OUTS = ("# fmt" + ": skip", "# fmt" + ": off", "# yapf" + ": disable")

#: ``path::qualified.name`` of each function allowed over the limit, for now.
ALLOWED: frozenset[str] = frozenset({})


def long_functions(tree: ast.AST, path: str, max_lines: int = MAX_LINES) -> dict[str, int]:
    """``{"path::qualified.name": lines}`` of every function or method of ``tree`` over
    ``max_lines`` lines, nested ones named through their enclosing functions and classes."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > max_lines:
                    found[f"{path}::{name}"] = lines
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def project_long_functions() -> dict[str, int]:
    """:func:`long_functions` over every Python file of :data:`FOLDERS`."""
    found: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found.update(long_functions(ast.parse(path.read_text(encoding="utf-8"), filename=rel), rel))
    return found


def test_no_function_is_over_the_limit_but_the_allowed() -> None:
    new = {name: lines for name, lines in project_long_functions().items() if name not in ALLOWED}
    assert not new, f"functions over {MAX_LINES} lines (split them into named steps): " + ", ".join(
        f"{name} ({lines})" for name, lines in sorted(new.items())
    )


def project_files() -> list[Path]:
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


def test_no_module_is_over_the_limit() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): n
        for path in project_files()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (move a coherent part out): {long}"


def test_no_code_opts_out_of_the_formatter() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in [*project_files(), *sorted((ROOT / "tests").rglob("*.py"))]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(opt in line for opt in OPT_OUTS)
    ]
    assert not found, "formatter opt-outs (let `ruff format` lay the code out): " + ", ".join(found)


def test_the_allow_list_only_shrinks() -> None:
    """An allowed function that is now short enough, or gone, leaves :data:`ALLOWED`."""
    stale = ALLOWED - set(project_long_functions())
    assert not stale, f"no longer over {MAX_LINES} lines: remove from ALLOWED: {', '.join(sorted(stale))}"


def test_long_functions_names_methods_and_nested_functions() -> None:
    def block(indent: int, lines: int) -> str:
        return "".join(" " * indent + "x = 1\n" for _ in range(lines))

    source = (
        "def short():\n"
        + block(4, 79)  # 80 lines: allowed
        + "def f():\n"
        + block(4, 80)
        + "class C:\n    def g(self):\n"
        + block(8, 80)
        + "def outer():\n    def inner():\n"
        + block(8, 80)
        + "    return inner\n"
    )
    assert long_functions(ast.parse(source), "m.py") == {
        "m.py::f": 81,
        "m.py::C.g": 81,
        "m.py::outer": 83,
        "m.py::outer.inner": 81,
    }
