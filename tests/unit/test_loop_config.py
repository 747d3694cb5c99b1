"""Every learner's config crosses from the driver to the Ray Train workers as a frozen dataclass,
read as attributes: the loop learners' (ppo, grpo, selfplay: :class:`LoopConfig`) and the TRL
learners' (sft, reward, dpo: :class:`TRLLoopConfig`). The drivers build them from the config
sections, they pickle and come back out of Ray Train's ``train_loop_config`` with the progress
handle and the scratch name, every attribute a learner reads is a field, and no module of
``pipelines/learner/`` (nor reward's and dpo's worker loops, in their phase modules) reads a
config through ``cfg["..."]``."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chessrl.lm.lm_eval import HeldoutPosition
from chessrl.rl.grpo_types import GRPOSettings
from cluster.storage import Storage
from pipelines import dpo, grpo, ppo, reward, selfplay, sft
from pipelines.config import ChessRLConfig
from pipelines.learner import WorkerConfig
from pipelines.learner.grpo import GRPOLoopConfig
from pipelines.learner.loop import LoopConfig
from pipelines.learner.ppo import PPOLoopConfig
from pipelines.learner.selfplay import SelfplayLoopConfig
from pipelines.learner.sft import SftLoopConfig
from pipelines.learner.trl import PairsLoopConfig, TRLLoopConfig

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
LEARNER = PIPELINES / "learner"

#: The worker side of the phase modules that keep their learner loop (reward's and dpo's, short
#: enough to stay there): the top-level functions and classes that run in the Ray Train workers.
PHASE_LEARNERS = {
    "reward.py": ("train_loop_per_worker", "RewardEval"),
    "dpo.py": ("train_loop_per_worker", "DPOEval"),
}

#: trl.py's worker side (its driver side reads the phase's config section, not the loop config).
TRL_WORKER = ("worker_setup", "training_arguments", "LearnerCallback", "PairsEval", "train_with_trl")

#: What a learner module calls its config.
CONFIG_NAMES = {"cfg", "config"}


def config_name(node: ast.expr) -> bool:
    """Whether ``node`` is a config by name: ``cfg``, ``config``, ``self.cfg``, ``learner.cfg``."""
    return (isinstance(node, ast.Name) and node.id in CONFIG_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in CONFIG_NAMES
    )


def parts(path: Path, within: tuple[str, ...] = ()) -> list[ast.AST]:
    """A module's tree, or (``within``) its top-level functions and classes of those names."""
    tree = ast.parse(path.read_text())
    if not within:
        return [tree]
    found = [node for node in tree.body if getattr(node, "name", None) in within]
    assert len(found) == len(within), f"{path.name} lacks some of {within}"
    return found


def dict_reads(path: Path, within: tuple[str, ...] = ()) -> list[str]:
    """The ``cfg["key"]`` and ``cfg.get("key")`` reads in a module (or in its ``within`` parts),
    as ``line: source``."""
    found = []
    for node in (node for part in parts(path, within) for node in ast.walk(part)):
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
    wrong = [line for path in sorted(LEARNER.glob("*.py")) for line in dict_reads(path)]
    for name, within in PHASE_LEARNERS.items():
        wrong += dict_reads(PIPELINES / name, within)
    assert not wrong, "read the typed config's attributes instead:\n" + "\n".join(wrong)


def test_the_check_finds_a_dict_read(tmp_path: Path) -> None:
    module = tmp_path / "loop.py"
    module.write_text(
        'def f(cfg, self):\n    return cfg["seed"], self.cfg["iterations"], cfg.get("use_gpu")\n'
    )
    assert len(dict_reads(module)) == 3


def attributes_read(path: Path, within: tuple[str, ...] = ()) -> set[str]:
    """Every ``cfg.X`` / ``self.cfg.X`` / ``learner.cfg.X`` attribute a module (or its ``within``
    parts) reads."""
    return {
        node.attr
        for part in parts(path, within)
        for node in ast.walk(part)
        if isinstance(node, ast.Attribute) and config_name(node.value)
    }


@pytest.mark.parametrize(
    ("module", "config", "within"),
    [
        ("learner/ppo.py", PPOLoopConfig, ()),
        ("learner/grpo.py", GRPOLoopConfig, ()),
        ("learner/selfplay.py", SelfplayLoopConfig, ()),
        ("learner/loop.py", LoopConfig, ()),
        ("learner/sft.py", SftLoopConfig, ()),
        ("learner/trl.py", PairsLoopConfig, TRL_WORKER),
        ("reward.py", reward.RewardLoopConfig, PHASE_LEARNERS["reward.py"]),
        ("dpo.py", dpo.DPOLoopConfig, PHASE_LEARNERS["dpo.py"]),
    ],
)
def test_every_attribute_a_learner_reads_is_a_field(
    module: str, config: type[WorkerConfig], within: tuple[str, ...]
) -> None:
    names = {f.name for f in dataclasses.fields(config)} | set(dir(config))
    read = attributes_read(PIPELINES / module, within)
    assert read, f"pipelines/{module} reads no config attribute: is the check looking at its learner?"
    missing = sorted(read - names)
    assert not missing, f"pipelines/{module} reads {missing}, not fields of {config.__name__}"


def fake_context(tmp_path: Path) -> Any:
    """What the drivers' config builders read of a :class:`pipelines.common.phase.PhaseContext`."""
    run = Storage.from_uri(str(tmp_path / "demo"))
    return SimpleNamespace(
        config=ChessRLConfig(),
        outputs={},
        phase_storage=run.child,
        tracking=SimpleNamespace(uri=None, run_id=None),
    )


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


def built_trl_configs(tmp_path: Path) -> list[TRLLoopConfig]:
    """Each TRL driver's loop config, from the default sections."""
    context = fake_context(tmp_path)
    found = SimpleNamespace(legal_weight=0.5, annotations=None)
    split = SimpleNamespace(heldout=[HeldoutPosition(("e2e4",), "e7e5")])
    pair = {"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4]}
    reward_data = SimpleNamespace(
        held_rows=[pair], spearman=[{"fen": "x"}], sample=[pair], text_format="facts"
    )
    dpo_data = SimpleNamespace(held_rows=[pair], probe=pair, chooser="the judge")
    return [
        sft.loop_config(context, found, split, 24),
        reward.loop_config(context, "/models/sft", reward_data),
        dpo.loop_config(context, "/models/sft", "/models/sft", dpo_data),
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


def test_the_trl_drivers_build_them_from_the_sections(tmp_path: Path) -> None:
    sft_cfg, reward_cfg, dpo_cfg = built_trl_configs(tmp_path)
    sections = ChessRLConfig()
    assert isinstance(sft_cfg, SftLoopConfig) and sft_cfg.batch_size == 24  # batch_size auto, resolved
    assert (sft_cfg.max_steps, sft_cfg.model, sft_cfg.legal_loss_weight, sft_cfg.soft_targets) == (
        sections.sft.max_steps,
        sections.sft.model,
        0.5,
        False,
    )
    assert sft_cfg.heldout == [HeldoutPosition(("e2e4",), "e7e5")]
    assert isinstance(reward_cfg, reward.RewardLoopConfig) and reward_cfg.base_model == "/models/sft"
    assert (reward_cfg.learning_rate, reward_cfg.world_size) == (sections.reward.learning_rate, 1)
    assert reward_cfg.text_format == "facts"  # into the model's config, so every checkpoint says it
    assert isinstance(dpo_cfg, dpo.DPOLoopConfig) and dpo_cfg.reference_name == "start"
    assert dpo_cfg.chooser == "the judge"  # the pairs' chooser, for the progress lines
    assert (dpo_cfg.beta, dpo_cfg.seed, dpo_cfg.tracking_uri) == (sections.dpo.beta, sections.run.seed, None)


def test_they_pickle_and_come_back_from_ray_trains_dict(tmp_path: Path) -> None:
    configs: list[WorkerConfig] = [*built_configs(tmp_path), *built_trl_configs(tmp_path)]
    for config in configs:
        # torch_trainer adds the board's handle and the scratch name beside the config
        train_loop_config = {**config.train_loop_config(), "progress": "handle", "scratch": "chess-rl-x"}
        back = type(config).of(pickle.loads(pickle.dumps(train_loop_config)))
        assert back == dataclasses.replace(config, progress="handle", scratch="chess-rl-x")
        with pytest.raises(dataclasses.FrozenInstanceError):
            back.progress = None  # type: ignore[misc]


def test_a_config_of_another_learner_is_refused(tmp_path: Path) -> None:
    ppo_cfg = built_configs(tmp_path)[0]
    with pytest.raises(TypeError, match="PPOLoopConfig, not a GRPOLoopConfig"):
        GRPOLoopConfig.of(ppo_cfg.train_loop_config())
    _, reward_cfg, _ = built_trl_configs(tmp_path)
    with pytest.raises(TypeError, match="RewardLoopConfig, not a DPOLoopConfig"):
        dpo.DPOLoopConfig.of(reward_cfg.train_loop_config())
    with pytest.raises(TypeError, match="PPOLoopConfig, not a TRLLoopConfig"):
        TRLLoopConfig.of(ppo_cfg.train_loop_config())


def test_the_process_group_outwaits_the_phases_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With several workers the others wait in a collective while rank 0 alone reads rollouts or
    plays gate games: the torch process group's timeout is the time limit plus 1,800 s (issue 71),
    not torch's 1,800 s that a long iteration met as "processes lost"."""
    import cluster.capacity
    from pipelines.learner import torch_trainer

    monkeypatch.setattr(
        cluster.capacity,
        "read_capacity",
        lambda: SimpleNamespace(largest=lambda *a, **k: 4.0, autoscales=False),
    )
    monkeypatch.setattr(cluster.capacity, "ensure", lambda *a, **k: None)
    context = fake_context(tmp_path)
    context.log, context.train_callbacks = (lambda _: None), []
    ppo_cfg, _, selfplay_cfg = built_configs(tmp_path)
    for config, limit, expected in ((ppo_cfg, 3 * 3600.0, 3 * 3600 + 1800), (selfplay_cfg, None, 86400)):
        loop = dataclasses.replace(config, time_limit_s=limit).train_loop_config()
        trainer = torch_trainer(
            context, "ppo", lambda _: None, loop, num_workers=2, cpus_per_worker=1.0, use_gpu=False
        )
        assert trainer.backend_config.timeout_s == expected
    sft_loop = built_trl_configs(tmp_path)[0].train_loop_config()
    trainer = torch_trainer(
        context, "sft", lambda _: None, sft_loop, num_workers=2, cpus_per_worker=1.0, use_gpu=False
    )
    assert trainer.backend_config.timeout_s == 1800  # every rank of a TRL learner works: the default
