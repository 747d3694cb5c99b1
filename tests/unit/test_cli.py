"""pipelines.cli: the `chess-rl` entry point (no phase is run here)."""

from __future__ import annotations

import pytest

from chessrl import __version__
from pipelines.cli import PHASES, main, usage


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"], []])
def test_help_lists_the_phases(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: chess-rl <phase> [options]")
    lines = out.splitlines()
    phases_at = lines.index("phases:")
    end = lines.index("", phases_at)
    built = [line.split()[0] for line in lines[phases_at + 1 : end]]
    assert built == [
        "prepare",
        "annotate",
        "sft",
        "evaluate",
        "preferences",
        "reward",
        "ppo",
        "grpo",
        "dpo",
        "selfplay",
        "rlaif",
        "tune",
        "config",
        "uci",
    ]
    assert "planned" not in out
    assert all(f"  {line}" in out for _, line in PHASES.values())


def test_one_line_a_phase_from_one_source() -> None:
    """cli.PHASES holds each phase's one line: its module's SUMMARY (the start of its --help) and
    the README's table of phases say the same, so they cannot drift apart."""
    import importlib
    import re
    from pathlib import Path

    from pipelines.cli import one_line

    for name, (module, _) in PHASES.items():
        if name in ("config", "uci"):
            continue  # commands, not phases: no Phase of their own
        mod = importlib.import_module(module)
        assert f'one_line("{name}")' in Path(mod.__file__).read_text(), name  # rlaif: in main's Phase
        assert getattr(mod, "SUMMARY", one_line(name)) == one_line(name), name
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)`(?: \(command\))? \| (.+?) \| \[", readme, re.M))
    assert set(rows) == set(PHASES) - {"config"}, sorted(rows)
    for name, text in rows.items():
        assert text.replace("`", "").replace("→", "->") == PHASES[name][1], name


def test_every_phase_is_a_pipelines_module() -> None:
    assert all(module.startswith("pipelines.") for module, _ in PHASES.values())


def test_usage_aligns_the_descriptions() -> None:
    rows = [line for line in usage().splitlines() if line.startswith("  ") and not line.startswith("   ")]
    starts = {len(line) - len(line[2:].split(None, 1)[1]) for line in rows}
    assert len(starts) == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"chess-rl {__version__}\n"


def test_unknown_phase_exits_2_and_says_what_exists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prepar"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == "error: unknown phase 'prepar'; phases: prepare, annotate, sft, evaluate, preferences, reward, ppo, grpo, dpo, selfplay, rlaif, tune, config, uci (chess-rl --help)\n"
    )


def test_every_phase_help_loads_neither_torch_nor_transformers_nor_ray() -> None:
    """`chess-rl <phase> --help` and a bad flag's one-line error come in half a second: a phase's
    driver imports torch, transformers and Ray where a run needs them (5-10 s at the top)."""
    import subprocess
    import sys

    script = (
        "import contextlib, io, sys\n"
        "from pipelines.cli import PHASES, main\n"
        "for name in PHASES:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main([name, '--help'])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'ray') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
