"""The selfplay phase's flags: the seed's names and defaults, and one clear error per bad value."""

from __future__ import annotations

import pytest

from cluster.errors import ConfigError
from pipelines import selfplay
from pipelines.common.phase import EXIT_USER_ERROR, build_parser, resolve_config
from pipelines.config import SelfplayConfig

SEED_DEFAULTS = {
    "episodes": 4,
    "batch_size": 16,
    "checkpoint_interval": 2,
    "exploration_rate": 0.1,
    "grad_accum_steps": 1,
    "mcts_simulations": 32,
    "mcts_cpuct": 1.5,
    "producer_workers": 0,
    "producer_queue_size": 16,
    "producer_device": "cpu",
    "amp": True,
}


def test_seed_flags_keep_their_defaults() -> None:
    config = SelfplayConfig()
    assert {k: getattr(config, k) for k in SEED_DEFAULTS} == SEED_DEFAULTS


def parse(*argv: str):
    parser, mapping = build_parser(selfplay.PHASE)
    return resolve_config(selfplay.PHASE, parser.parse_args(["--config", "tiny", *argv]), mapping)


def test_seed_flags_parse_by_their_names() -> None:
    config = parse(
        "--episodes",
        "8",
        "--batch-size",
        "64",
        "--checkpoint-interval",
        "3",
        "--exploration-rate",
        "0.2",
        "--seed",
        "11",
        "--grad-accum-steps",
        "2",
        "--mcts-simulations",
        "48",
        "--mcts-cpuct",
        "2.0",
        "--producer-workers",
        "3",
        "--producer-queue-size",
        "4",
        "--producer-device",
        "cuda",
        "--no-amp",
    )
    sp = config.selfplay
    assert (sp.episodes, sp.batch_size, sp.checkpoint_interval, sp.exploration_rate) == (8, 64, 3, 0.2)
    assert (sp.grad_accum_steps, sp.mcts_simulations, sp.mcts_cpuct) == (2, 48, 2.0)
    assert (sp.producer_workers, sp.producer_queue_size, sp.producer_device, sp.amp) == (3, 4, "cuda", False)
    assert config.run.seed == 11


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        (["--episodes", "0"], "selfplay.episodes"),
        (["--exploration-rate", "1.5"], "selfplay.exploration_rate"),
        (["--producer-queue-size", "0"], "selfplay.producer_queue_size"),
        (["--gate-threshold", "2"], "selfplay.gate_threshold"),
        (["--set", "selfplay.mcts_cpuct=-1"], "selfplay.mcts_cpuct"),
        (["--set", "selfplay.simulations=3"], "simulations"),
    ],
)
def test_bad_values_name_the_key(argv: list[str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse(*argv)


def test_bad_device_is_one_message_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert selfplay.main(["--producer-device", "gpu", "--no-tracking"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "--producer-device" in err and "cuda" in err and "Traceback" not in err


def test_bad_value_through_main_exits_2_without_starting_ray(capsys: pytest.CaptureFixture[str]) -> None:
    assert selfplay.main(["--episodes", "0", "--no-tracking"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "selfplay.episodes" in err and "Traceback" not in err
