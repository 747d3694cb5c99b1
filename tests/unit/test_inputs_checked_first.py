"""Every phase checks its inputs in the driver before Ray starts (``Phase.check``): a junk suite
or opening book, a missing model for each phase that loads one, a PGN input that is missing, not
PGN or unreadable. Each ends with exactly one ``error:`` line and exit code 2, nothing written
under ``<storage>/<run>/``, and Ray never started (``ray_session`` is not called, no ``ray:`` log
line, ``ray.is_initialized()`` unchanged)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zstandard

from cluster.storage import Storage
from pipelines import (
    evaluate,
    grpo,
    ppo,
    preferences,
    prepare,
    reward,
    rlaif,
    selfplay,
    sft,
    tune,
    uci,
)
from pipelines.common import phase
from pipelines.common.phase import EXIT_USER_ERROR, Inputs
from pipelines.config import ChessRLConfig

REPO = Path(__file__).resolve().parents[2]
EPD = REPO / "tests" / "data" / "epd"
PGN = REPO / "tests" / "data" / "pgn"
RUN = "r"


class RayStarted(AssertionError):
    pass


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if a command gets as far as starting (or joining) Ray."""
    import ray

    before = ray.is_initialized()

    def refuse(*args: object, **kwargs: object) -> None:
        raise RayStarted("Ray was started before the inputs were checked")

    monkeypatch.setattr(phase, "ray_session", refuse)
    monkeypatch.setattr(rlaif, "ray_session", refuse)
    monkeypatch.chdir(REPO)  # the presets name tests/data/... relative to the repository
    yield
    assert ray.is_initialized() == before


def fails_first(
    main: Callable[[list[str]], int],
    argv: list[str],
    storage: Path | None,
    expected: str,
    capsys: pytest.CaptureFixture[str],
    before: set[Path] | None = None,
) -> str:
    """Run a command that must fail on its inputs; return its one error line."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert code == EXIT_USER_ERROR, err
    assert len(errors) == 1, err
    assert expected in errors[0], err
    assert "Traceback" not in err, err
    assert not any(line.startswith("ray:") or "] ray: " in line for line in lines), err
    if storage is not None:
        run = storage / RUN
        written = {p for p in run.rglob("*")} if run.exists() else set()
        assert written == (before or set()), sorted(written - (before or set()))
    return errors[0]


def common(storage: Path) -> list[str]:
    return ["--config", "tiny", "--storage", str(storage), "--run-name", RUN, "--no-tracking"]


def fake_model(folder: Path) -> Path:
    """Enough of a saved model for a location check (its config.json)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    )
    return folder


# ---------------------------------------------------------------------------------------------
# evaluate: suites and opening books, read whole before any game


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("junk.epd", "this is not a position\n", "junk.epd:1: not an EPD position"),
        (
            "late.epd",
            "{first}\n\n{first}\nrnbqkbnr/pppppppp/8 w - - bm e4;\n",
            "late.epd:4: not an EPD position",
        ),
        ("game.pgn", (PGN / "molinari-bordais-1979.pgn").read_text(), "game.pgn:1: not an EPD position"),
        ("nothing.epd", "\n# only a comment\n", "holds no EPD test position"),
        (
            "nobm.epd",
            "8/8/8/8/8/8/6k1/4K2R w K - id x;\n",
            "nobm.epd:1: an EPD test position needs a bm or am",
        ),
    ],
)
def test_a_junk_suite_file_fails_before_any_game(tmp_path, capsys, no_ray, name, text, expected) -> None:
    suite = tmp_path / name
    first = (EPD / "wac.epd").read_text().splitlines()[0]
    suite.write_text(text.replace("{first}", first))
    storage = tmp_path / "runs"
    argv = [
        *common(storage),
        "--players",
        "random",
        "stockfish:skill=0",
        "--suites",
        str(EPD / "wac.epd"),
        str(suite),
    ]
    line = fails_first(evaluate.main, argv, storage, expected, capsys)
    assert line.startswith("error: evaluate.suites (--suites): ") and str(suite) in line


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "book.epd",
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -\nnot a position\n",
            "book.epd:2: not an EPD",
        ),
        ("notes.pgn", "just some notes, no games here\n", "holds no usable opening"),
        ("empty.epd", "", "holds no usable opening"),
        ("missing.epd", None, "does not exist"),
    ],
)
def test_a_junk_opening_book_fails_before_any_game(tmp_path, capsys, no_ray, name, text, expected) -> None:
    book = tmp_path / name
    if text is not None:
        book.write_text(text)
    storage = tmp_path / "runs"
    argv = [*common(storage), "--players", "random", "stockfish:skill=0", "--openings", str(book)]
    line = fails_first(evaluate.main, argv, storage, expected, capsys)
    assert line.startswith("error: evaluate.openings (--openings): ") and str(book) in line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--opening-plies", "13", "6"],
            "evaluate.opening_plies: ['13', '6'] is not allowed: value error, "
            "opening_plies must be 0 <= min <= max, got 13 6",
        ),
        (
            ["--set", "evaluate.opening_plies=[-1,6]"],
            "evaluate.opening_plies: [-1, 6] is not allowed: "
            "value error, opening_plies must be 0 <= min <= max",
        ),
        (
            ["--opening-source", "book"],
            "evaluate.opening_source: 'book' is not allowed: input should be "
            "'heldout' or 'random' (allowed: heldout, random)",
        ),
        (["--positions-from", "{tmp}/none"], "evaluate.positions_from (--positions-from): no games at "),
    ],
)
def test_bad_opening_settings_are_one_line_before_any_game(tmp_path, capsys, no_ray, extra, expected) -> None:
    storage = tmp_path / "runs"
    argv = [
        *common(storage),
        "--players",
        "random",
        "stockfish:skill=0",
        *(e.replace("{tmp}", str(tmp_path)) for e in extra),
    ]
    fails_first(evaluate.main, argv, storage, expected, capsys)


# ---------------------------------------------------------------------------------------------
# a missing model, for every phase that loads one

MISSING = "missing-model"  # a folder under tmp_path that is never made (no config.json)
#: ppo against a reward model from the moves sft (the tiny preset's is the board sft graded by Stockfish)
RM_PPO = ["--reward", "model", "--text-format", "moves", "--samples-per-state", "1", "--table-positions", "0"]


def model_cases() -> list[tuple[str, Callable[[list[str]], int], list[str], str]]:
    """(id, command, arguments ({tmp} is tmp_path, {ok} a folder with a config.json), the error)."""
    no_model = "is not a saved model folder (no config.json)"
    return [
        (
            "sft --base-model",
            sft.main,
            ["--base-model", "{tmp}/" + MISSING],
            "sft.base_model (--base-model): {tmp}/" + MISSING + " is not a transformers checkpoint",
        ),
        (
            "preferences --policy",
            preferences.main,
            ["--policy", "{tmp}/" + MISSING],
            "preferences.policy (--policy): {tmp}/" + MISSING + " " + no_model,
        ),
        ("preferences, no sft model", preferences.main, [], "run `chess-rl sft` first, or pass --policy"),
        (
            "reward --base-model",
            reward.main,
            ["--base-model", "{tmp}/" + MISSING],
            "reward.base_model (--base-model): {tmp}/" + MISSING + " is not a transformers checkpoint",
        ),
        ("reward, no sft model", reward.main, [], "no sft model at"),
        (
            "ppo --policy",
            ppo.main,
            ["--policy", "{tmp}/" + MISSING, "--reward-model", "{ok}", *RM_PPO],
            "ppo.policy (--policy): {tmp}/" + MISSING + " " + no_model,
        ),
        (
            "ppo --reward-model",
            ppo.main,
            ["--policy", "{ok}", "--reward-model", "{tmp}/" + MISSING, *RM_PPO],
            "ppo.reward_model (--reward-model): {tmp}/" + MISSING + " " + no_model,
        ),
        (
            "ppo, no sft model",
            ppo.main,
            ["--reward-model", "{ok}", *RM_PPO],
            "run `chess-rl sft` first, or pass --policy",
        ),
        (
            "ppo, no reward model",
            ppo.main,
            ["--policy", "{ok}", *RM_PPO],
            "run `chess-rl reward` first, or pass --reward-model",
        ),
        (
            "ppo, no board sft model",
            ppo.main,
            [],
            "run `chess-rl sft --text-format board` first, or pass --policy",
        ),
        (
            "grpo --policy",
            grpo.main,
            ["--policy", "{tmp}/" + MISSING],
            "grpo.policy (--policy): {tmp}/" + MISSING + " " + no_model,
        ),
        ("grpo, no board sft model", grpo.main, [], "run `chess-rl sft --text-format board` first"),
        (
            "evaluate lm:",
            evaluate.main,
            ["--players", "lm:{tmp}/" + MISSING, "random"],
            "player 'lm:{tmp}/" + MISSING + "': {tmp}/" + MISSING + " " + no_model,
        ),
        (
            "evaluate mcts:",
            evaluate.main,
            ["--players", "random", "mcts:{tmp}/missing.pt"],
            "no network file at {tmp}/missing.pt",
        ),
        (
            "evaluate sft",
            evaluate.main,
            ["--players", "sft", "random"],
            "run `chess-rl sft` first, or use lm:DIR",
        ),
        ("evaluate mcts", evaluate.main, ["--players", "mcts", "random"], "run `chess-rl selfplay` first"),
        (
            "tune of ppo, no sft model",
            tune.main,
            ["--phase", "ppo"],
            "run `chess-rl sft --text-format board` first, or pass --policy",
        ),
    ]


@pytest.mark.parametrize(
    ("command", "args", "expected"), [c[1:] for c in model_cases()], ids=[c[0] for c in model_cases()]
)
def test_a_missing_model_fails_before_ray(tmp_path, capsys, no_ray, command, args, expected) -> None:
    ok = fake_model(tmp_path / "ok")
    storage = tmp_path / "runs"

    def fill(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{ok}", str(ok))

    fails_first(command, [*common(storage), *map(fill, args)], storage, fill(expected), capsys)


def test_uci_with_a_missing_model_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    fails_first(
        uci.main,
        ["--model", str(tmp_path / MISSING)],
        None,
        f"{tmp_path / MISSING} is not a transformers checkpoint folder (no config.json)",
        capsys,
    )


@pytest.mark.parametrize(
    ("saved", "expected"),
    [(b"not a torch file", "is not a network selfplay saved"), ("other-net", "was made for a network")],
)
def test_selfplay_with_an_unusable_saved_network_fails_before_ray(
    tmp_path, capsys, no_ray, saved, expected
) -> None:
    storage = tmp_path / "runs"
    folder = storage / RUN / "selfplay"
    folder.mkdir(parents=True)
    if saved == "other-net":
        selfplay.save_weights(
            Storage.from_uri(str(folder)), "gen0.pt", {"model": {}, "net": {"blocks": 99}, "version": 0}
        )
    else:
        (folder / "gen0.pt").write_bytes(saved)
    before = set((storage / RUN).rglob("*"))
    line = fails_first(selfplay.main, common(storage), storage, expected, capsys, before)
    assert "gen0.pt" in line


# ---------------------------------------------------------------------------------------------
# prepare: PGN inputs


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("missing.pgn", None, "prepare.inputs (--inputs): no such file or folder"),
        ("positions.pgn", (EPD / "wac.epd").read_bytes(), "positions.pgn: not PGN: it starts with"),
        (
            "table.pgn",
            b"white,black,result\nA,B,1-0\n",
            "table.pgn: not PGN: it starts with 'white,black,result'",
        ),
        ("picture.pgn", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "picture.pgn: not PGN: binary data"),
        (
            "plain.pgn.zst",
            (PGN / "molinari-bordais-1979.pgn").read_bytes(),
            "plain.pgn.zst: not zstd-compressed",
        ),
        (
            "notes.pgn.zst",
            zst(b"my notes\n\n1. e4 is best\n"),
            "notes.pgn.zst: not PGN: it starts with 'my notes'",
        ),
    ],
)
def test_a_pgn_input_that_is_missing_or_not_pgn_fails_before_ray(
    tmp_path, capsys, no_ray, name, content, expected
):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    storage = tmp_path / "runs"
    argv = [
        *common(storage),
        "--generate",
        "0",
        "--inputs",
        str(PGN / "kasparov-deep-blue-1997.pgn"),
        str(path),
    ]
    fails_first(prepare.main, argv, storage, expected, capsys)


def test_an_unreadable_pgn_input_fails_before_ray(tmp_path, capsys, no_ray, monkeypatch) -> None:
    path = tmp_path / "locked.pgn"
    path.write_bytes((PGN / "molinari-bordais-1979.pgn").read_bytes())
    storage = tmp_path / "runs"
    argv = [*common(storage), "--generate", "0", "--inputs", str(path)]
    if os.geteuid() != 0:  # root reads anything
        path.chmod(0)
        try:
            fails_first(prepare.main, argv, storage, f"prepare.inputs (--inputs): cannot open {path}", capsys)
        finally:
            path.chmod(0o644)

    def failing_read(stream: io.RawIOBase, name: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(prepare, "check_pgn_start", failing_read)
    fails_first(prepare.main, argv, storage, "prepare.inputs (--inputs): cannot read", capsys)


def test_good_and_damaged_pgn_inputs_pass_the_check(tmp_path) -> None:
    """Real files (BOM, header-less, .zst) pass; a .zst damaged after its start is left to the
    reader, which keeps the games before the damage (counted, not fatal); an empty file too."""
    data = (PGN / "masters" / "Ding.pgn.zst").read_bytes()
    (tmp_path / "truncated.pgn.zst").write_bytes(data[: len(data) // 2])
    (tmp_path / "corrupt.pgn.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(256)) * 40)
    (tmp_path / "empty.pgn").write_bytes(b"")
    (tmp_path / "headerless.pgn").write_bytes(b"1. d4 d5 2. c4 e6 *\n")
    config = ChessRLConfig.model_validate(
        {"prepare": {"inputs": [str(PGN), str(tmp_path)]}, "run": {"storage": str(tmp_path / "runs")}}
    )
    files = prepare.check_prepare(config, Inputs.of(config))
    assert len(files) == len(list(PGN.rglob("*.pgn*"))) + 4
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------
# rlaif: every phase that will run is checked before Ray; what an earlier phase writes is given


def test_rlaif_checks_the_phases_it_will_run_before_ray(tmp_path, capsys, no_ray) -> None:
    junk = tmp_path / "junk.epd"
    junk.write_text("not a position\n")
    storage = tmp_path / "runs"
    line = fails_first(
        rlaif.main,
        [*common(storage), "--set", f"evaluate.suites=[{junk}]"],
        storage,
        f"rlaif: phase evaluate: evaluate.suites (--suites): {junk}:1: not an EPD position",
        capsys,
    )
    assert line.startswith("error: rlaif: phase evaluate: ")
    line = fails_first(
        rlaif.main,
        [*common(storage), "--only", "prepare", "sft", "--set", f"sft.base_model={tmp_path / MISSING}"],
        storage,
        "sft.base_model",
        capsys,
    )
    assert line.startswith("error: rlaif: phase sft: ")


def test_rlaif_takes_what_an_earlier_phase_writes_as_given(tmp_path, monkeypatch) -> None:
    """The whole graph on an empty run: no sft or reward model, no games yet, and still no error
    before Ray (it gets as far as starting Ray)."""
    monkeypatch.chdir(REPO)

    def reached(*args: object, **kwargs: object) -> None:
        raise RayStarted("reached Ray")

    monkeypatch.setattr(rlaif, "ray_session", reached)
    with pytest.raises(RayStarted, match="reached Ray"):
        rlaif.main(common(tmp_path / "runs"))
    assert not (tmp_path / "runs" / RUN).exists()


def test_a_check_takes_produced_inputs_as_given(tmp_path, monkeypatch) -> None:
    judged = {"reward": "model", "text_format": None}  # ppo's judge path (the default grades with Stockfish)
    config = ChessRLConfig.model_validate({"run": {"storage": str(tmp_path), "name": RUN}, "ppo": judged})
    run = Storage.from_uri(str(tmp_path)).child(RUN)
    given = Inputs(run, frozenset({"prepare", "sft", "reward"}))
    found = ppo.check_ppo(config, given)
    assert found.facts is None and found.policy == str(tmp_path / RUN / "sft" / "model")
    with pytest.raises(Exception, match="run `chess-rl sft` first"):
        ppo.check_ppo(config, Inputs(run, frozenset({"prepare", "reward"})))
    players = [f"lm:{tmp_path / RUN / 'ppo' / 'model'}", "sft", "random"]
    evaluation = config.model_copy(
        update={"evaluate": config.evaluate.model_copy(update={"players": players})}
    )
    monkeypatch.chdir(REPO)
    assert [
        s.label for s in evaluate.check_evaluate(evaluation, Inputs(run, frozenset({"ppo", "sft"}))).specs
    ] == [*players]
    with pytest.raises(Exception, match="is not a saved model folder"):
        evaluate.check_evaluate(evaluation, Inputs(run, frozenset({"sft"})))
