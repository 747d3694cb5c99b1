"""cluster.config with the real root config: presets, YAML, errors, overrides, flags, redaction."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cluster.config import (
    PRESET_DIR,
    RaySection,
    RunSection,
    Section,
    TrackingSection,
    add_section_flags,
    available_presets,
    flag_name,
    flatten,
    load_config,
    overrides_from_args,
    parse_set_overrides,
    read_yaml,
    redact,
    resolve_preset,
    set_dotted,
)
from cluster.errors import ConfigError, UserError
from pipelines.config import ChessRLConfig, PrepareConfig


def config_error(**kwargs: object) -> ConfigError:
    kwargs.setdefault("source", "my.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(ChessRLConfig, **kwargs)  # type: ignore[arg-type]
    return info.value


def write(tmp_path: Path, text: str, name: str = "my.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# presets


def test_presets_are_the_yaml_files_in_configs() -> None:
    assert available_presets() == sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    assert {"tiny", "small", "cluster"} <= set(available_presets())


@pytest.mark.parametrize("preset", available_presets())
def test_every_preset_validates(preset: str) -> None:
    config = load_config(ChessRLConfig, path=resolve_preset(preset))
    assert isinstance(config.prepare, PrepareConfig)
    assert config.prepare.inputs


def test_tiny_preset_values() -> None:
    config = load_config(ChessRLConfig, path=resolve_preset("tiny"))
    assert (config.run.name, config.run.storage, config.ray.address) == ("demo", "./runs", None)
    assert (config.prepare.inputs, config.prepare.min_plies, config.prepare.shard_games) == (
        ["tests/data/pgn"],
        10,
        1000,
    )


def test_preset_name_resolves_to_its_file() -> None:
    assert resolve_preset("tiny") == PRESET_DIR / "tiny.yaml"


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_preset("huge")
    assert str(info.value) == (
        f"unknown preset 'huge'; presets: {', '.join(available_presets())} (or pass the path of a YAML file)"
    )


def test_preset_dir_can_be_another_folder(tmp_path: Path) -> None:
    write(tmp_path, "run: {name: a}\n", "alpha.yaml")
    write(tmp_path, "run: {name: b}\n", "beta.yaml")
    write(tmp_path, "not a preset\n", "notes.txt")
    assert available_presets(tmp_path) == ["alpha", "beta"]
    assert resolve_preset("beta", tmp_path) == tmp_path / "beta.yaml"
    with pytest.raises(ConfigError, match="presets: alpha, beta "):
        resolve_preset("gamma", tmp_path)


@pytest.mark.parametrize("spec", ["missing.yaml", "missing.yml", "some/dir/missing"])
def test_missing_config_file_is_named(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_preset(spec)
    assert str(info.value) == f"config file not found: {spec!r}"


def test_existing_yaml_path_is_returned_as_it_is(tmp_path: Path) -> None:
    path = write(tmp_path, "run: {name: x}\n")
    assert resolve_preset(str(path)) == path


# ---------------------------------------------------------------------------------------------
# read_yaml


def test_invalid_yaml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "run:\n  name: x\n  seed: [1, 2\nprepare: {}\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value) == f"{path}: line 4: invalid YAML: expected ',' or ']', but got ':'"
    assert info.value.source == str(path)


def test_tab_indentation_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "run:\n\tname: x\n")
    with pytest.raises(ConfigError, match=r": line 2: invalid YAML: found character '\\t'"):
        read_yaml(path)


@pytest.mark.parametrize(
    ("text", "kind"), [("- run\n- ray\n", "list"), ("just words\n", "str"), ("7\n", "int")]
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value) == f"{path}: the top level must be a mapping of sections, not {kind}"


def test_empty_yaml_is_an_empty_config(tmp_path: Path) -> None:
    assert read_yaml(write(tmp_path, "# only a comment\n")) == {}
    assert load_config(ChessRLConfig, path=write(tmp_path, "")) == ChessRLConfig()


def test_unreadable_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"run:\n  name: \xff\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml: cannot read config: 'utf-8' codec"):
        read_yaml(path)


# ---------------------------------------------------------------------------------------------
# load_config errors: file or flag, key, what is allowed


def test_unknown_section_suggests_and_lists_sections() -> None:
    err = config_error(data={"prepar": {}})
    assert str(err) == (
        "my.yaml: prepar: unknown section (did you mean 'prepare'?); allowed keys: prepare, ray, run, tracking"
    )
    assert isinstance(err, UserError) and isinstance(err, ValueError)


def test_unknown_key_suggests_and_lists_the_section_keys() -> None:
    err = config_error(data={"prepare": {"min_elos": 2000}})
    assert str(err) == (
        "my.yaml: prepare.min_elos: unknown key (did you mean 'min_elo'?); allowed keys: inputs, max_games, "
        "min_elo, min_plies, output, parallelism, shard_games, terminations, time_controls"
    )


def test_unknown_key_with_nothing_close_has_no_suggestion() -> None:
    err = config_error(data={"ray": {"zzz": 1}})
    assert "did you mean" not in str(err)
    assert str(err).startswith("my.yaml: ray.zzz: unknown key; allowed keys: address, dashboard, ")


def test_negative_value_quotes_it_and_says_the_bound() -> None:
    err = config_error(data={"prepare": {"min_elo": -5}})
    assert (
        str(err) == "my.yaml: prepare.min_elo: -5 is not allowed: input should be greater than or equal to 0"
    )
    assert (err.source, err.message.split(":")[0]) == ("my.yaml", "prepare.min_elo")


def test_wrong_type_quotes_the_value() -> None:
    err = config_error(data={"prepare": {"shard_games": "lots"}})
    assert str(err) == (
        "my.yaml: prepare.shard_games: 'lots' is not allowed: input should be a valid integer, "
        "unable to parse string as an integer"
    )


def test_section_given_a_scalar_is_a_config_error() -> None:
    err = config_error(data={"prepare": 5})
    assert str(err).startswith("my.yaml: prepare: 5 is not allowed: input should be a valid dictionary")


def test_literal_choices_are_listed() -> None:
    err = config_error(data={"prepare": {"time_controls": ["blitz", "fast"]}})
    assert str(err).startswith("my.yaml: prepare.time_controls.1: 'fast' is not allowed: ")
    assert str(err).endswith(
        "(allowed: ultrabullet, bullet, blitz, rapid, classical, correspondence, unknown)"
    )


def test_run_name_pattern_is_enforced() -> None:
    err = config_error(data={"run": {"name": "my run"}})
    assert "run.name: 'my run' is not allowed: string should match pattern" in str(err)
    assert load_config(ChessRLConfig, data={"run": {"name": "run-1.b_2"}}).run.name == "run-1.b_2"


def test_empty_inputs_list_is_rejected() -> None:
    err = config_error(data={"prepare": {"inputs": []}})
    assert str(err).startswith("my.yaml: prepare.inputs: [] is not allowed: list should have at least 1 item")


def test_several_errors_are_all_reported() -> None:
    err = config_error(data={"prepare": {"min_elo": -1, "min_plies": -2}})
    assert str(err) == (
        "my.yaml: prepare.min_elo: -1 is not allowed: input should be greater than or equal to 0; "
        "prepare.min_plies: -2 is not allowed: input should be greater than or equal to 0"
    )


def test_error_from_a_yaml_file_names_that_file(tmp_path: Path) -> None:
    path = write(tmp_path, "prepare:\n  min_elo: -5\n")
    with pytest.raises(ConfigError) as info:
        load_config(ChessRLConfig, path=path)
    assert str(info.value).startswith(f"{path}: prepare.min_elo: -5 is not allowed")


def test_load_config_does_not_modify_the_given_mapping() -> None:
    data = {"prepare": {"min_elo": 100}}
    load_config(ChessRLConfig, data=data, overrides={"prepare.min_elo": (2000, "--min-elo")})
    assert data == {"prepare": {"min_elo": 100}}


def test_sections_left_out_keep_their_defaults() -> None:
    config = load_config(ChessRLConfig, data={"prepare": {"min_elo": 1800}})
    assert config.prepare.min_elo == 1800
    assert config.prepare.shard_games == PrepareConfig().shard_games
    assert config.run == RunSection() and config.ray == RaySection() and config.tracking == TrackingSection()


# ---------------------------------------------------------------------------------------------
# overrides


def test_override_wins_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "prepare:\n  min_elo: 1000\n  min_plies: 5\n")
    config = load_config(ChessRLConfig, path=path, overrides={"prepare.min_elo": (2000, "--min-elo")})
    assert (config.prepare.min_elo, config.prepare.min_plies) == (2000, 5)


def test_bad_override_names_the_flag_not_the_file() -> None:
    err = config_error(data={}, overrides={"prepare.min_elo": (-3, "--min-elo")})
    assert str(err) == (
        "command line (--min-elo): prepare.min_elo: -3 is not allowed: input should be greater than or equal to 0"
    )


def test_unknown_key_from_set_names_the_set_flag() -> None:
    err = config_error(data={}, overrides=parse_set_overrides(["prepare.min_elos=5"]))
    assert str(err).startswith(
        "command line (--set prepare.min_elos): prepare.min_elos: unknown key (did you mean 'min_elo'?)"
    )


def test_file_error_beside_a_good_override_still_names_the_file() -> None:
    err = config_error(data={"prepare": {"min_elo": -1}}, overrides={"prepare.min_plies": (3, "--min-plies")})
    assert str(err).startswith("my.yaml: prepare.min_elo: -1 is not allowed")


def test_errors_from_the_file_and_a_flag_each_name_their_origin() -> None:
    # The file's bad value must not be blamed on the flag (nor the flag's on the file).
    err = config_error(
        data={"prepare": {"min_elo": -1}}, overrides={"prepare.min_plies": (-3, "--min-plies")}
    )
    message = str(err)
    assert "my.yaml" in message
    assert "--min-plies" in message
    assert not message.startswith("command line (--min-plies): prepare.min_elo")


def test_set_into_a_value_of_the_file_is_a_config_error() -> None:
    data: dict[str, object] = {"prepare": {"min_elo": 5}}
    with pytest.raises(ConfigError, match=r"^prepare\.min_elo\.x: 'min_elo' is a value, not a section$"):
        set_dotted(data, "prepare.min_elo.x", 1)


def test_set_below_a_value_names_the_set_flag_not_the_file() -> None:
    # --set prepare.min_elo.x=1 turns min_elo into {'x': 1}: the flag is to blame, not my.yaml.
    err = config_error(data={}, overrides=parse_set_overrides(["prepare.min_elo.x=1"]))
    assert str(err).startswith(
        "command line (--set prepare.min_elo.x): prepare.min_elo: {'x': 1} is not allowed"
    )


def test_set_dotted_creates_sections() -> None:
    data: dict[str, object] = {}
    set_dotted(data, "prepare.min_elo", 2000)
    set_dotted(data, "prepare.min_plies", 4)
    assert data == {"prepare": {"min_elo": 2000, "min_plies": 4}}


def test_set_overrides_parse_values_as_yaml() -> None:
    overrides = parse_set_overrides(
        [
            "prepare.min_elo=2000",
            "prepare.time_controls=[blitz, rapid]",
            "ray.dashboard=true",
            "ray.object_store_gb=2.5",
            "ray.address=",
            "run.name = spaced ",
            "tracking.uri=http://h:5000/a=b",
        ]
    )
    assert overrides == {
        "prepare.min_elo": (2000, "--set prepare.min_elo"),
        "prepare.time_controls": (["blitz", "rapid"], "--set prepare.time_controls"),
        "ray.dashboard": (True, "--set ray.dashboard"),
        "ray.object_store_gb": (2.5, "--set ray.object_store_gb"),
        "ray.address": (None, "--set ray.address"),
        "run.name": ("spaced", "--set run.name"),
        "tracking.uri": ("http://h:5000/a=b", "--set tracking.uri"),
    }


def test_set_value_that_is_not_yaml_is_kept_as_text() -> None:
    assert parse_set_overrides(["run.name=a: b: c"]) == {"run.name": ("a: b: c", "--set run.name")}


@pytest.mark.parametrize("item", ["min_elo=3", "prepare.min_elo", "=3", "prepare..x=1", "1prepare.x=1", ""])
def test_bad_set_syntax_is_a_config_error_with_an_example(item: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_set_overrides([item])
    assert str(info.value) == (
        f"--set {item!r}: expected SECTION.KEY=VALUE, for example --set prepare.min_elo=2000"
    )


# ---------------------------------------------------------------------------------------------
# flags generated from sections


def prepare_parser() -> tuple[argparse.ArgumentParser, dict[str, tuple[str, str]]]:
    parser = argparse.ArgumentParser(prog="chess-rl prepare")
    mapping = add_section_flags(parser, PrepareConfig, "prepare")
    return parser, mapping


def test_flag_names() -> None:
    assert flag_name("min_elo") == "--min-elo"
    assert flag_name("shard_games") == "--shard-games"


def test_one_flag_per_field_mapped_to_its_dotted_key() -> None:
    _, mapping = prepare_parser()
    assert mapping["prepare__min_elo"] == ("prepare.min_elo", "--min-elo")
    assert sorted(key for key, _ in mapping.values()) == sorted(
        f"prepare.{f}" for f in PrepareConfig.model_fields
    )


def test_help_text_comes_from_the_field_docstrings() -> None:
    parser, _ = prepare_parser()
    text = " ".join(parser.format_help().split())
    assert (
        "--min-elo N Keep games whose two players are both rated at least this (0: no rating needed) [default: 0]"
        in text
    )
    assert "--shard-games N Games per Parquet file (and per parse task) [default: 2000]" in text
    assert "(choices: ultrabullet, bullet, blitz, rapid, classical, correspondence, unknown)" in text


def test_help_never_shows_an_undefined_default() -> None:
    # Fields with a default_factory (inputs, time_controls, terminations) have no plain default.
    parser, _ = prepare_parser()
    assert "PydanticUndefined" not in parser.format_help()


@pytest.mark.parametrize("section", [RunSection, RaySection, TrackingSection, PrepareConfig])
def test_help_renders_for_every_section(section: type[Section]) -> None:
    # RaySection's docstrings contain '%' ("min(30% of RAM, 4)"), which argparse must not format.
    parser = argparse.ArgumentParser()
    add_section_flags(parser, section, "s")
    text = parser.format_help()
    for name, field in section.model_fields.items():
        assert flag_name(name) in text
        assert field.description
    if section is RaySection:
        assert "min(30% of RAM, 4)" in " ".join(text.split())


def test_flags_left_out_give_no_overrides() -> None:
    parser, mapping = prepare_parser()
    assert overrides_from_args(parser.parse_args([]), mapping) == {}


def test_list_flags_take_several_values_and_feed_load_config() -> None:
    parser, mapping = prepare_parser()
    args = parser.parse_args(
        [
            "--inputs",
            "a.pgn",
            "b/",
            "--time-controls",
            "blitz",
            "rapid",
            "--min-elo",
            "2000",
            "--max-games",
            "9",
        ]
    )
    overrides = overrides_from_args(args, mapping)
    assert overrides["prepare.inputs"] == (["a.pgn", "b/"], "--inputs")
    assert overrides["prepare.time_controls"] == (["blitz", "rapid"], "--time-controls")
    config = load_config(ChessRLConfig, data={}, overrides=overrides)
    assert (config.prepare.inputs, config.prepare.time_controls) == (["a.pgn", "b/"], ["blitz", "rapid"])
    assert (config.prepare.min_elo, config.prepare.max_games) == (2000, 9)


def test_bad_flag_value_names_the_flag_and_the_choices() -> None:
    parser, mapping = prepare_parser()
    overrides = overrides_from_args(parser.parse_args(["--time-controls", "blitz", "slow"]), mapping)
    err = config_error(data={}, overrides=overrides)
    assert str(err).startswith(
        "command line (--time-controls): prepare.time_controls.1: 'slow' is not allowed"
    )
    assert "(allowed: ultrabullet, bullet, blitz" in str(err)


def test_bool_fields_get_yes_and_no_flags() -> None:
    parser = argparse.ArgumentParser()
    mapping = add_section_flags(parser, TrackingSection, "tracking")
    assert overrides_from_args(parser.parse_args(["--enabled"]), mapping) == {
        "tracking.enabled": (True, "--enabled")
    }
    assert overrides_from_args(parser.parse_args(["--no-enabled"]), mapping) == {
        "tracking.enabled": (False, "--enabled")
    }
    assert overrides_from_args(parser.parse_args([]), mapping) == {}


def test_skipped_fields_and_nested_sections_get_no_flag() -> None:
    parser = argparse.ArgumentParser()
    mapping = add_section_flags(parser, PrepareConfig, "prepare", skip=("output", "parallelism"))
    assert "prepare__output" not in mapping and "prepare__parallelism" not in mapping
    with pytest.raises(SystemExit):
        parser.parse_args(["--output", "x"])
    assert add_section_flags(argparse.ArgumentParser(), ChessRLConfig, "root") == {}


def test_flags_work_in_an_argument_group() -> None:
    parser = argparse.ArgumentParser()
    group = parser.add_argument_group("prepare")
    mapping = add_section_flags(group, PrepareConfig, "prepare")
    args = parser.parse_args(["--min-plies", "20"])
    assert overrides_from_args(args, mapping) == {"prepare.min_plies": (20, "--min-plies")}


def test_number_flags_are_typed_so_argparse_rejects_words(capsys: pytest.CaptureFixture[str]) -> None:
    parser, mapping = prepare_parser()
    args = parser.parse_args(["--min-elo", "2000", "--max-games", "5"])
    assert overrides_from_args(args, mapping) == {
        "prepare.min_elo": (2000, "--min-elo"),
        "prepare.max_games": (5, "--max-games"),  # int | None
    }
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--min-elo", "lots"])
    assert info.value.code == 2
    assert "argument --min-elo: invalid int value: 'lots'" in capsys.readouterr().err


def test_float_flag_is_a_float() -> None:
    parser = argparse.ArgumentParser()
    mapping = add_section_flags(parser, RaySection, "ray")
    args = parser.parse_args(["--object-store-gb", "2.5", "--num-cpus", "4", "--address", "auto"])
    assert overrides_from_args(args, mapping) == {
        "ray.object_store_gb": (2.5, "--object-store-gb"),
        "ray.num_cpus": (4, "--num-cpus"),
        "ray.address": ("auto", "--address"),
    }


def test_negative_number_flag_reaches_validation_and_names_the_flag() -> None:
    parser, mapping = prepare_parser()
    overrides = overrides_from_args(parser.parse_args(["--min-elo", "-5"]), mapping)
    err = config_error(data={}, overrides=overrides)
    assert str(err) == (
        "command line (--min-elo): prepare.min_elo: -5 is not allowed: input should be greater than or equal to 0"
    )


# ---------------------------------------------------------------------------------------------
# redact and flatten


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("s3.secret_access_key", "abc", "***"),
        ("tracking.token", "abc", "***"),
        ("db.PASSWORD", "abc", "***"),
        ("x.api_key", 12345, "***"),
        ("x.credentials", None, "***"),
        ("tracking.uri", "http://user:pw@host:5000", "http://***@host:5000"),
        ("tracking.uri", "postgresql://u:p@db:5432/mlflow", "postgresql://***@db:5432/mlflow"),
        ("run.storage", "s3://AKIA:wJalr@bucket/x", "s3://***@bucket/x"),
        ("tracking.uri", "http://host:5000/a@b", "http://host:5000/a@b"),  # '@' in the path only
        ("run.name", "user@host", "user@host"),  # not a URI
        ("ray.num_cpus", 4, 4),
    ],
)
def test_redact(key: str, value: object, shown: object) -> None:
    assert redact(key, value) == shown


def test_flatten_gives_dotted_keys_for_every_field() -> None:
    params = flatten(ChessRLConfig())
    assert params["prepare.min_elo"] == 0
    assert params["run.name"] == "demo"
    assert params["prepare.inputs"] == ["tests/data/pgn"]
    expected = {
        f"{section}.{name}"
        for section, field in ChessRLConfig.model_fields.items()
        for name in field.annotation.model_fields  # type: ignore[union-attr]
    }
    assert set(params) == expected


def test_flatten_hides_secret_keys_and_uri_credentials() -> None:
    config = load_config(ChessRLConfig, data={"tracking": {"uri": "http://bob:hunter2@mlflow:5000"}})
    params = flatten(config)
    assert params["tracking.uri"] == "http://***@mlflow:5000"
    assert "hunter2" not in repr(params)
    assert flatten({"a": {"token": "x", "uri": "https://u:p@h/"}, "password": None}) == {
        "a.token": "***",
        "a.uri": "https://***@h/",
        "password": "***",
    }


def test_flatten_hides_uri_credentials_inside_lists() -> None:
    config = load_config(
        ChessRLConfig,
        data={"prepare": {"inputs": ["s3://chess-data/a.pgn", "https://bob:hunter2@host/b.pgn"]}},
    )
    assert "hunter2" not in repr(flatten(config))
