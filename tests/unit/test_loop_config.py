"""The loop learners' configs (ppo, grpo, selfplay) cross from the driver to the Ray Train workers
as frozen dataclasses, read as attributes: the drivers build them from the config sections,
they pickle and come back out of Ray Train's ``train_loop_config`` with the progress handle, every
attribute a learner reads is a field, and no module of ``pipelines/learner/`` reads a config
through ``cfg["..."]`` (but the TRL learners', still dicts)."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chessrl.rl.grpo_types import GRPOSettings
from cluster.storage import Storage
from pipelines import grpo, ppo, selfplay
from pipelines.config import ChessRLConfig
from pipelines.learner.grpo import GRPOLoopConfig
from pipelines.learner.loop import LoopConfig
from pipelines.learner.ppo import PPOLoopConfig
from pipelines.learner.selfplay import SelfplayLoopConfig

LEARNER = Path(__file__).resolve().parents[2] / "pipelines" / "learner"

#: The learners that still take their config as a dict: the TRL phases' (sft, reward, dpo), whose
#: typed config is the next step. The test fails once one no longer reads a dict: drop it here.
STILL_DICTS = {"sft.py", "trl.py"}

#: What a learner module calls its config.
CONFIG_NAMES = {"cfg", "config"}


def config_name(node: ast.expr) -> bool:
    """Whether ``node`` is a config by name: ``cfg``, ``config``, ``self.cfg``, ``learner.cfg``."""
    return (isinstance(node, ast.Name) and node.id in CONFIG_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in CONFIG_NAMES
    )


def dict_reads(path: Path) -> list[str]:
    """The ``cfg["key"]`` and ``cfg.get("key")`` reads in a module, as ``line: source``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and config_name(node.value):
            key = node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and config_name(node.func.value)
            and node.args
        ):
            key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_learner_reads_its_config_as_a_dict() -> None:
    reads = {path.name: dict_reads(path) for path in sorted(LEARNER.glob("*.py"))}
    wrong = [line for name, lines in reads.items() if name not in STILL_DICTS for line in lines]
    assert not wrong, "read the typed config's attributes instead:\n" + "\n".join(wrong)
    converted = sorted(name for name in STILL_DICTS if not reads.get(name))
    assert not converted, f"{converted} read no dict any more: drop them from STILL_DICTS"


def test_the_check_finds_a_dict_read(tmp_path: Path) -> None:
    module = tmp_path / "loop.py"
    module.write_text('def f(cfg, self):\n    return cfg["seed"], self.cfg["iterations"], cfg.get("use_gpu")\n')
    assert len(dict_reads(module)) == 3


def attributes_read(path: Path) -> set[str]:
    """Every ``cfg.X`` / ``self.cfg.X`` / ``learner.cfg.X`` attribute a module reads."""
    return {
        node.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and config_name(node.value)
    }


@pytest.mark.parametrize(
    ("module", "config"),
    [("ppo.py", PPOLoopConfig), ("grpo.py", GRPOLoopConfig), ("selfplay.py", SelfplayLoopConfig),
     ("loop.py", LoopConfig)],
)  # fmt: skip
def test_every_attribute_a_learner_reads_is_a_field(module: str, config: type[LoopConfig]) -> None:
    names = {f.name for f in dataclasses.fields(config)} | set(dir(config))
    missing = sorted(attributes_read(LEARNER / module) - names)
    assert not missing, f"pipelines/learner/{module} reads {missing}, not fields of {config.__name__}"


def fake_context(tmp_path: Path) -> Any:
    """What the drivers' config builders read of a :class:`pipelines.phase.PhaseContext`."""
    run = Storage.from_uri(str(tmp_path / "demo"))
    return SimpleNamespace(
        config=ChessRLConfig(), outputs={}, phase_storage=run.child,
        tracking=SimpleNamespace(uri=None, run_id=None),
    )  # fmt: skip


def built_configs(tmp_path: Path) -> list[LoopConfig]:
    """Each driver's loop config, from the default sections."""
    context = fake_context(tmp_path)
    actors = SimpleNamespace(server_name="demo/parameter-server", namespace="ns", queue=None)
    found = ppo.PPOInputs(opponents=[], policy="/models/sft", reward="", facts={}, text_format="board")
    grpo_found = grpo.GRPOInputs(settings=GRPOSettings(), policy="/models/sft", facts={})
    return [
        ppo.loop_config(context, found, 3, actors),
        grpo.loop_config(context, grpo_found, {"policy": 3, "environment": 128}, 8, None, 2.0),
        selfplay.learner_config(context, context.phase_storage("selfplay"), actors, 1.0),
    ]


def test_the_drivers_build_them_from_the_sections(tmp_path: Path) -> None:
    ppo_cfg, grpo_cfg, selfplay_cfg = built_configs(tmp_path)
    sections = ChessRLConfig()
    assert isinstance(ppo_cfg, PPOLoopConfig) and ppo_cfg.settings.text_format == "board"
    assert (ppo_cfg.iterations, ppo_cfg.threads, ppo_cfg.reward_path) == (sections.ppo.iterations, 3, "")
    assert ppo_cfg.phase_uri.endswith("/demo/ppo")
    assert isinstance(grpo_cfg, GRPOLoopConfig) and (grpo_cfg.minibatch, grpo_cfg.threads) == (8, 2)
    assert isinstance(selfplay_cfg, SelfplayLoopConfig)
    assert selfplay_cfg.net.blocks == sections.selfplay.blocks
    assert selfplay_cfg.mcts.simulations == sections.selfplay.mcts_simulations


def test_they_pickle_and_come_back_from_ray_trains_dict(tmp_path: Path) -> None:
    for config in built_configs(tmp_path):
        # torch_trainer adds the board's handle and the scratch name beside the config
        train_loop_config = {**config.train_loop_config(), "progress": "handle", "scratch": "chess-rl-x"}
        back = type(config).of(pickle.loads(pickle.dumps(train_loop_config)))
        assert back == dataclasses.replace(config, progress="handle")
        with pytest.raises(dataclasses.FrozenInstanceError):
            back.iterations = 1  # type: ignore[misc]


def test_a_config_of_another_learner_is_refused(tmp_path: Path) -> None:
    ppo_cfg = built_configs(tmp_path)[0]
    with pytest.raises(TypeError, match="PPOLoopConfig, not a GRPOLoopConfig"):
        GRPOLoopConfig.of(ppo_cfg.train_loop_config())


def test_the_process_group_outwaits_the_phases_time_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With several workers the others wait in a collective while rank 0 alone reads rollouts or
    plays gate games: the torch process group's timeout is the time limit plus 1,800 s (issue 71),
    not torch's 1,800 s that a long iteration met as "processes lost"."""
    import cluster.capacity
    from pipelines.learner import torch_trainer

    monkeypatch.setattr(cluster.capacity, "read_capacity",
                        lambda: SimpleNamespace(largest=lambda *a, **k: 4.0, autoscales=False))  # fmt: skip
    monkeypatch.setattr(cluster.capacity, "ensure", lambda *a, **k: None)
    context = fake_context(tmp_path)
    context.log, context.train_callbacks = (lambda _: None), []
    ppo_cfg, _, selfplay_cfg = built_configs(tmp_path)
    for config, limit, expected in ((ppo_cfg, 3 * 3600.0, 3 * 3600 + 1800), (selfplay_cfg, None, 86400)):
        loop = dataclasses.replace(config, time_limit_s=limit).train_loop_config()
        trainer = torch_trainer(context, "ppo", lambda _: None, loop, num_workers=2, cpus_per_worker=1.0, use_gpu=False)
        assert trainer.backend_config.timeout_s == expected
    trainer = torch_trainer(context, "sft", lambda _: None, {"model": "tiny"}, num_workers=2, cpus_per_worker=1.0,
                            use_gpu=False)  # fmt: skip
    assert trainer.backend_config.timeout_s == 1800  # every rank of a TRL learner works: the default
