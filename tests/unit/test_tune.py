"""pipelines.tune without Ray: the search space, its checks, the per-trial config and the best trial."""

from __future__ import annotations

import pytest
import yaml

from cluster.config import load_config, resolve_preset
from cluster.errors import ConfigError
from pipelines import tune
from pipelines.common.phase import EXIT_USER_ERROR
from pipelines.config import ChessRLConfig, TuneConfig


def config(**tune_fields: object) -> ChessRLConfig:
    return ChessRLConfig(tune=TuneConfig(**tune_fields))


def test_space_items_from_the_command_line_are_yaml_values_and_bare_commas_are_lists() -> None:
    cfg = TuneConfig(
        search="random",
        space=[
            "ppo.kl_coef=0.01,0.1",
            "ppo.temperature=[0.8, 1.0]",
            "ppo.learning_rate={loguniform: [1e-6, 1e-4]}",
        ],
    )
    assert cfg.space == {
        "ppo.kl_coef": [0.01, 0.1],
        "ppo.temperature": [0.8, 1.0],
        "ppo.learning_rate": {"loguniform": [1e-6, 1e-4]},
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"space": ["ppo.kl_coef"]}, "expected SECTION.KEY=VALUES"),
        ({"space": {"ppo.kl_coef": []}}, "an empty list"),
        ({"space": {"ppo.kl_coef": {"normal": [0, 1]}}}, "a distribution is one of"),
        ({"space": {"ppo.kl_coef": {"uniform": [1, 0]}}, "search": "random"}, "low < high"),
        ({"space": {"ppo.kl_coef": None}}, "expected a list of values"),
        ({"space": {"ppo.kl_coef": {"uniform": [0, 1]}}}, "use search: random"),
    ],
)
def test_malformed_spaces_are_errors_of_the_tune_section(fields: dict, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        TuneConfig(**fields)


def test_a_single_value_is_a_one_point_grid() -> None:
    assert TuneConfig(space=["ppo.kl_coef=0.5"]).space == {"ppo.kl_coef": [0.5]}
    assert TuneConfig(space={"ppo.kl_coef": 0.5}).space == {"ppo.kl_coef": [0.5]}


def test_the_default_space_of_each_phase() -> None:
    assert tune.sweep_space(config(phase="ppo")) == {"ppo.kl_coef": [0.01, 0.03, 0.1, 0.3]}
    assert tune.sweep_space(config(phase="grpo")) == {"grpo.beta": [0.0, 0.02, 0.04, 0.1]}
    assert tune.sweep_space(config(phase="selfplay")) == {"selfplay.mcts_cpuct": [1.0, 1.5, 2.5, 4.0]}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"phase": "ppo", "space": {"ppo.kl": [0.1]}},
            "'ppo.kl' is not a key of ppo (did you mean ppo.kl_coef?)",
        ),
        ({"phase": "ppo", "space": {"ppo.nonsense": [1]}}, "is not a key of ppo; keys: num_workers,"),
        ({"phase": "grpo", "space": {"ppo.kl_coef": [0.1]}}, "a grpo sweep varies keys of its own section"),
        (
            {"phase": "selfplay", "space": {"selfplay.mcts_cpuct": [1.0, "high"]}},
            "selfplay.mcts_cpuct='high'",
        ),
        ({"phase": "grpo", "space": {"grpo.loss_type": ["grpo", "ppo"]}}, "grpo.loss_type='ppo'"),
    ],
)
def test_a_space_over_an_unknown_key_or_a_bad_value_is_one_config_error(fields: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        tune.sweep_space(config(**fields))
    assert expected in str(err.value)


def test_the_command_reports_a_bad_space_in_one_line_before_ray_starts(tmp_path, capsys) -> None:
    common = ["--config", "tiny", "--storage", str(tmp_path), "--run-name", "bad", "--no-tracking"]
    cases = [
        (["--space", "ppo.kl=0.1,0.2"], "did you mean ppo.kl_coef?"),
        (
            ["--phase", "grpo", "--space", "selfplay.mcts_cpuct=1,2"],
            "a grpo sweep varies keys of its own section",
        ),
        (["--space", "ppo.kl_coef={uniform: [0, 1]}"], "use search: random"),
        (["--phase", "xpo"], "tune.phase"),
        (["--phase", "dpo"], "no model at"),  # a dpo sweep checks dpo's inputs: no sft model here
    ]
    for args, expected in cases:
        assert tune.main([*common, *args]) == EXIT_USER_ERROR
        err = capsys.readouterr().err.strip().splitlines()
        assert len([line for line in err if line.startswith("error: ")]) == 1, err
        assert expected in err[-1] and "Traceback" not in "\n".join(err), err
    assert not (tmp_path / "bad").exists()


def test_a_trial_config_is_the_base_with_its_values_and_best_yaml_loads_as_a_preset(tmp_path) -> None:
    base = load_config(ChessRLConfig, path=resolve_preset("tiny"))
    trial = tune.with_params(base, {"ppo.kl_coef": 0.3, "ppo.temperature": 0.9})
    assert (trial.ppo.kl_coef, trial.ppo.temperature, trial.ppo.clip) == (0.3, 0.9, base.ppo.clip)
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(trial.model_dump(mode="json"), sort_keys=False))
    assert load_config(ChessRLConfig, path=path) == trial
    with pytest.raises(Exception, match="kl_coef"):
        tune.with_params(base, {"ppo.kl_coef": "lots"})


def test_the_best_trial_is_among_those_that_got_furthest() -> None:
    rows = [
        {"trial": "stopped", "iteration": 2, "metric": 9.0},
        {"trial": "low", "iteration": 8, "metric": 0.1},
        {"trial": "high", "iteration": 8, "metric": 0.6},
    ]
    assert tune.best_row(rows, "max")["trial"] == "high"
    assert tune.best_row(rows, "min")["trial"] == "low"


def test_metric_and_mode_defaults() -> None:
    assert tune.metric_and_mode(TuneConfig(phase="ppo")) == ("reward_mean", "max")
    assert tune.metric_and_mode(TuneConfig(phase="selfplay")) == ("loss", "min")
    assert tune.metric_and_mode(TuneConfig(phase="grpo", metric="legal_rate")) == ("legal_rate", "max")
    assert tune.metric_and_mode(TuneConfig(phase="grpo", metric="kl", mode="min")) == ("kl", "min")


def test_the_fingerprint_changes_with_the_space_and_the_phase_section_only() -> None:
    base = config(phase="grpo")
    space = tune.sweep_space(base)
    same = base.model_copy(update={"ppo": base.ppo.model_copy(update={"kl_coef": 0.5})})
    other = base.model_copy(update={"grpo": base.grpo.model_copy(update={"iterations": 3})})
    assert tune.fingerprint(base, space) == tune.fingerprint(same, space)
    assert tune.fingerprint(base, space) != tune.fingerprint(other, space)
    assert tune.fingerprint(base, space) != tune.fingerprint(base, {"grpo.beta": [0.0]})
