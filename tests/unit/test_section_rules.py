"""The learner sections share one part (:mod:`pipelines.config.resources`), their keys flat as
before; a rule among a section's own keys is its validator, so it fires when the config loads,
whether the values came from a YAML file, from a phase's flags or from ``--set``, as one line
that names the file or the flags, the keys and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.config import load_config
from cluster.errors import ConfigError
from pipelines import grpo, ppo
from pipelines.common import phase
from pipelines.common.phase import EXIT_USER_ERROR, build_parser, resolve_config
from pipelines.config import (
    ChessRLConfig,
    DPOConfig,
    GRPOConfig,
    LearnerResources,
    PPOConfig,
    RewardConfig,
    SftConfig,
    TrainerResources,
)

TOO_FEW = (
    "ppo.episodes_per_iteration (--episodes-per-iteration) is 2, fewer than ppo.num_workers (--num-workers) "
    "3: each learner worker learns on whole episodes, at least one an iteration"
)


def flags_error(section_phase, *argv: str) -> str:
    """The ConfigError a phase's command line gets when its config resolves (the tiny preset)."""
    parser, mapping = build_parser(section_phase.PHASE)
    with pytest.raises(ConfigError) as caught:
        resolve_config(section_phase.PHASE, parser.parse_args(list(argv)), mapping)
    return str(caught.value)


def test_the_learner_sections_share_their_resource_keys() -> None:
    for section in (SftConfig, RewardConfig, DPOConfig):
        assert issubclass(section, TrainerResources)
        fields = section.model_fields
        assert fields["cpus_per_worker"].annotation == int | None and "precision" in fields
    for section in (PPOConfig, GRPOConfig):
        assert issubclass(section, LearnerResources) and not issubclass(section, TrainerResources)
        assert section.model_fields["cpus_per_worker"].annotation == float | None
        assert "precision" not in section.model_fields
    # one docstring, the shared part's, is every section's help text
    shared = LearnerResources.model_fields["num_workers"].description
    assert shared and all(s.model_fields["num_workers"].description == shared for s in (SftConfig, PPOConfig))
    # the keys and flags are flat as before
    data = {"sft": {"num_workers": 2, "precision": "fp32"}, "ppo": {"cpus_per_worker": 1.5}}
    cfg = load_config(ChessRLConfig, data=data)
    assert (cfg.sft.num_workers, cfg.sft.precision, cfg.ppo.cpus_per_worker) == (2, "fp32", 1.5)
    with pytest.raises(ConfigError, match=r"ppo\.precision: unknown key"):
        load_config(ChessRLConfig, data={"ppo": {"precision": "bf16"}})
    parser, _ = build_parser(ppo.PHASE)
    options = {o for action in parser._actions for o in action.option_strings}
    assert {"--num-workers", "--cpus-per-worker", "--use-gpu", "--no-use-gpu"} <= options


def test_a_rule_fires_from_a_yaml_file_as_one_line_naming_the_file_and_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("extends: tiny\nppo:\n  episodes_per_iteration: 2\n  num_workers: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config(ChessRLConfig, path=path)
    assert str(caught.value) == f"{path}: {TOO_FEW}"
    # the file gave one key, a flag the other: both are named
    path.write_text("ppo:\n  num_workers: 3\n")
    with pytest.raises(ConfigError) as caught:
        flag = {"ppo.episodes_per_iteration": (2, "--episodes-per-iteration")}
        load_config(ChessRLConfig, path=path, overrides=flag)
    assert str(caught.value) == f"{path} and command line (--episodes-per-iteration): {TOO_FEW}"


def test_a_rule_fires_from_phase_flags_and_set_as_one_line_naming_the_flags() -> None:
    line = flags_error(ppo, "--episodes-per-iteration", "2", "--num-workers", "3", "--kl-coef", "0.1")
    assert line == f"command line (--episodes-per-iteration, --num-workers): {TOO_FEW}"
    line = flags_error(ppo, "--set", "ppo.samples_per_state=4", "--set", "ppo.gamma=0.5")
    assert line.startswith("command line (--set ppo.samples_per_state, --set ppo.gamma): "), line
    assert "ppo.samples_per_state (--samples-per-state) is 4 with ppo.gamma (--gamma) 0.5" in line
    assert "set ppo.gamma 0" in line and "\n" not in line
    # ppo keeps its best policy of several: the final one alone is no choice
    line = flags_error(ppo, "--iterations", "20", "--select-every", "20")
    assert line.startswith(
        "command line (--select-every, --iterations): ppo.select_every (--select-every) is 20"
    ), line
    assert "or 0 for no selection" in line and "\n" not in line
    # one flag breaks a rule with a default: the flag and both keys are named
    line = flags_error(grpo, "--no-masked")
    assert line.startswith("command line (--masked): grpo.own_positions (--own-positions) is 0.5:"), line
    assert "grpo.masked (--masked)" in line
    line = flags_error(grpo, "--text-format", "moves", "--policy-share", "0.8")
    assert line.startswith("command line (--policy-share, --text-format): grpo.policy_share"), line
    assert "moves format" in line and "rookworld" in line
    line = flags_error(grpo, "--dead-zone", "0.5")
    assert line.startswith("command line (--dead-zone): grpo.dead_zone (--dead-zone) is 0.5, not below"), line
    assert "grpo.max_loss (--max-loss) 0.5" in line
    # a bad value of one key is still its own message, before the rules among keys
    assert "grpo.dead_zone: 1.5 is not allowed" in flags_error(grpo, "--dead-zone", "1.5")


def test_a_rule_broken_on_the_command_line_is_one_error_line_before_ray(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray was started before the config was checked")

    monkeypatch.setattr(phase, "ray_session", refuse)
    argv = ["--storage", str(tmp_path), "--no-tracking", "--prompts-per-iteration", "2", "--num-workers", "3"]
    code = grpo.main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == EXIT_USER_ERROR and len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith("error: command line (--prompts-per-iteration, --num-workers): "), errors[0]
    assert "grpo.prompts_per_iteration" in errors[0] and "grpo.num_workers" in errors[0]


def test_a_position_mix_of_zeros_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "mix.yaml"
    path.write_text("grpo:\n  position_mix: {opening: 0, middlegame: 0, endgame: 0}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(ChessRLConfig, path=path)
    line = str(caught.value)
    assert line.startswith(f"{path}: grpo.position_mix: the position mix needs shares >= 0"), line


def test_every_rule_holds_for_the_defaults_and_a_valid_combination_loads() -> None:
    ChessRLConfig()
    cfg = load_config(ChessRLConfig, data={"ppo": {"masked": False, "samples_per_state": 1, "gamma": 1.0}})
    assert cfg.ppo.gamma == 1.0
    rookworld = {"text_format": "rookworld", "policy_share": 0.8, "own_positions": 0}
    cfg = load_config(ChessRLConfig, data={"grpo": rookworld})
    assert cfg.grpo.policy_share == 0.8
