"""The one loader for saved models (:mod:`chessrl.arena.saved_models`): its cheap check for each
kind (a good file, a truncated copy, header garbage, a missing file), loading through it, and
``chess-rl evaluate`` / ``chess-rl uci`` / every phase that starts from a saved model with a
truncated ``model.safetensors``: one ``error:`` line naming the file, exit 2, Ray never started."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from chessrl.arena import saved_models
from chessrl.arena.saved_models import check_saved_model, load_saved_model
from chessrl.lm.checkpoints import ModelLoadError
from chessrl.search.network import NetConfig, PolicyValueNet
from pipelines import dpo, evaluate, grpo, ppo, preferences, reward, sft, uci
from pipelines.common import phase
from pipelines.common.phase import EXIT_USER_ERROR

REPO = Path(__file__).resolve().parents[2]


def tiny_config(**extra: object) -> object:
    """A GPT-2 of a few thousand parameters on the chess tokenizer: saved and loaded in ~0.1 s."""
    from transformers import GPT2Config

    from chessrl.lm.tokenizer import build_chess_tokenizer

    tok = build_chess_tokenizer(64)
    config = GPT2Config(
        vocab_size=len(tok),
        n_layer=1,
        n_head=1,
        n_embd=4,
        n_positions=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **extra,
    )
    return config, tok


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A saved policy, a saved reward model and a self-play network, each written once."""
    from transformers import GPT2ForSequenceClassification, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("saved")
    config, tok = tiny_config()
    GPT2LMHeadModel(config).save_pretrained(root / "policy")
    tok.save_pretrained(root / "policy")
    reward_config, _ = tiny_config(num_labels=1)
    GPT2ForSequenceClassification(reward_config).save_pretrained(root / "reward")
    tok.save_pretrained(root / "reward")
    net = NetConfig(blocks=0, channels=4, history=1)
    torch.save({"model": PolicyValueNet(net).state_dict(), "net": net.__dict__}, root / "best.pt")
    return {"policy": root / "policy", "reward": root / "reward", "network": root / "best.pt"}


def copy(source: Path, target: Path) -> Path:
    """A copy of a saved folder or file to damage."""
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copyfile(source, target)
    return target


def truncate(path: Path, keep: float = 0.5) -> tuple[int, int]:
    """Cut ``path`` to ``keep`` of its length; returns (kept, whole) in bytes."""
    data = path.read_bytes()
    kept = int(len(data) * keep)
    path.write_bytes(data[:kept])
    return kept, len(data)


def test_good_models_pass_the_check_and_load(saved) -> None:
    for kind in ("policy", "reward", "network"):
        check_saved_model(str(saved[kind]), kind)
    model, tokenizer = load_saved_model(str(saved["policy"]), "policy")
    assert model.config.n_embd == 4 and tokenizer.pad_token_id is not None
    reward, _ = load_saved_model(f"file://{saved['reward']}", "reward")
    assert reward.config.num_labels == 1 and not reward.training
    net = load_saved_model(str(saved["network"]), "network")
    assert isinstance(net, PolicyValueNet) and not net.training


@pytest.mark.parametrize("kind", ["policy", "reward"])
def test_a_truncated_safetensors_file_is_one_line_naming_it(saved, tmp_path, kind) -> None:
    folder = copy(saved[kind], tmp_path / "model")
    kept, whole = truncate(folder / "model.safetensors")
    with pytest.raises(ModelLoadError) as info:
        check_saved_model(str(folder), kind)
    assert str(info.value) == (
        f"{folder}/model.safetensors is not a readable safetensors file (truncated: {kept:,} of {whole:,} "
        "bytes); copy the model again or re-export it"
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"<!DOCTYPE html><html>Access denied</html>", "its header length, "),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}", "its header is not safetensors' JSON"),
        (b"\x05\x00", "truncated: 2 of at least 8 bytes"),
        (b"", "truncated: 0 of at least 8 bytes"),
    ],
)
def test_safetensors_header_garbage_is_one_line_naming_the_file(saved, tmp_path, data, expected) -> None:
    folder = copy(saved["policy"], tmp_path / "model")
    (folder / "model.safetensors").write_bytes(data)
    with pytest.raises(ModelLoadError, match="model.safetensors is not a readable safetensors file") as info:
        check_saved_model(str(folder), "policy")
    assert expected in str(info.value) and str(folder) in str(info.value)


def test_missing_config_or_weights(saved, tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="is not a transformers checkpoint folder \\(no config.json\\)"):
        check_saved_model(str(tmp_path / "nowhere"), "policy")
    folder = copy(saved["policy"], tmp_path / "model")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=f"^{folder} has no weights file"):
        check_saved_model(str(folder), "reward")


def test_sharded_weights_are_checked_through_their_index(saved, tmp_path) -> None:
    folder = copy(saved["policy"], tmp_path / "model")
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="model-00002-of-00002.safetensors is missing"):
        check_saved_model(str(folder), "policy")
    shutil.copyfile(folder / "model-00001-of-00002.safetensors", folder / "model-00002-of-00002.safetensors")
    check_saved_model(str(folder), "policy")
    truncate(folder / "model-00002-of-00002.safetensors")
    with pytest.raises(
        ModelLoadError, match="model-00002-of-00002.safetensors is not a readable safetensors"
    ):
        check_saved_model(str(folder), "policy")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("truncate", "is not a readable PyTorch file (truncated or damaged: "),
        (b"not a torch file", "is not a readable PyTorch file (not a PyTorch file)"),
        (b"", "is not a readable PyTorch file (empty)"),
        ("missing", "no network at "),
    ],
)
def test_a_damaged_or_missing_network(saved, tmp_path, damage, expected) -> None:
    path = tmp_path / "best.pt"
    if damage == "truncate":
        truncate(copy(saved["network"], path))
    elif isinstance(damage, bytes):
        path.write_bytes(damage)
    with pytest.raises(ModelLoadError) as info:
        check_saved_model(str(path), "network")
    assert expected in str(info.value) and str(path) in str(info.value)


def test_a_damaged_file_past_the_check_still_fails_as_one_line(saved, tmp_path, monkeypatch) -> None:
    folder = copy(saved["policy"], tmp_path / "model")
    truncate(folder / "model.safetensors")
    monkeypatch.setattr(saved_models, "check_saved_model", lambda path, kind: None)
    with pytest.raises(
        ModelLoadError, match=f"^{folder}/model.safetensors is not a readable safetensors file"
    ):
        load_saved_model(str(folder), "policy")
    with pytest.raises(
        ModelLoadError, match=f"^{folder}/model.safetensors is not a readable safetensors file"
    ):
        load_saved_model(str(folder), "reward")


# ---------------------------------------------------------------------------------------------
# the commands: one line, exit 2, before Ray


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if the command gets as far as starting (or joining) Ray."""
    import ray

    started = ray.is_initialized()
    monkeypatch.setattr(phase, "ray_session", lambda *_, **__: pytest.fail("Ray started before the check"))
    monkeypatch.chdir(REPO)  # the presets name tests/data/... relative to the repository
    yield
    assert ray.is_initialized() == started


def one_error_line(code: int, err: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == EXIT_USER_ERROR, err
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_evaluate_with_a_truncated_model_fails_before_ray(saved, tmp_path, capsys, no_ray) -> None:
    folder = copy(saved["policy"], tmp_path / "model")
    kept, whole = truncate(folder / "model.safetensors")
    storage = tmp_path / "runs"
    argv = [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "r",
        "--no-tracking",
        "--players",
        f"lm:{folder}",
        "random",
    ]
    line = one_error_line(evaluate.main(argv), capsys.readouterr().err)
    assert line == (
        f"error: player 'lm:{folder}': {folder}/model.safetensors is not a readable safetensors file "
        f"(truncated: {kept:,} of {whole:,} bytes); copy the model again or re-export it"
    )
    assert not (storage / "r").exists()


def test_uci_with_a_truncated_model_is_one_line_and_exit_2(saved, tmp_path, capsys) -> None:
    folder = copy(saved["policy"], tmp_path / "model")
    kept, whole = truncate(folder / "model.safetensors")
    line = one_error_line(uci.main(["--model", str(folder)]), capsys.readouterr().err)
    assert line == (
        f"error: {folder}/model.safetensors is not a readable safetensors file "
        f"(truncated: {kept:,} of {whole:,} bytes); copy the model again or re-export it"
    )


@pytest.mark.parametrize(
    ("phase_module", "flag", "damaged", "other"),
    [
        (sft, "--base-model", "policy", []),
        (preferences, "--policy", "policy", []),
        (reward, "--base-model", "policy", []),
        (dpo, "--policy", "policy", []),
        (
            ppo,
            "--policy",
            "policy",
            [
                "--reward-model",
                "reward",
                "--reward",
                "model",
                "--text-format",
                "moves",
                "--samples-per-state",
                "1",
                "--table-positions",
                "0",
            ],
        ),  # the reward-model path
        (
            ppo,
            "--reward-model",
            "reward",
            [
                "--policy",
                "policy",
                "--reward",
                "model",
                "--text-format",
                "moves",
                "--samples-per-state",
                "1",
                "--table-positions",
                "0",
            ],
        ),
        (grpo, "--policy", "policy", []),
    ],
    ids=["sft", "preferences", "reward", "dpo", "ppo policy", "ppo reward model", "grpo"],
)
def test_a_phase_given_a_truncated_model_fails_before_ray(
    saved, tmp_path, capsys, no_ray, phase_module, flag, damaged, other
) -> None:
    """The training phases check the weights in the driver too, not only config.json: a
    truncated copy is refused before Ray starts, where it would otherwise fail in a Ray worker."""
    folder = copy(saved[damaged], tmp_path / "model")
    kept, whole = truncate(folder / "model.safetensors")
    storage = tmp_path / "runs"
    argv = [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "r",
        "--no-tracking",
        flag,
        str(folder),
        *[str(saved[x]) if x in saved else x for x in other],
    ]
    line = one_error_line(phase_module.main(argv), capsys.readouterr().err)
    key = f"{phase_module.PHASE.name}.{flag[2:].replace('-', '_')} ({flag})"
    assert line == (
        f"error: {key}: {folder}/model.safetensors is not a readable safetensors file "
        f"(truncated: {kept:,} of {whole:,} bytes); copy the model again or re-export it"
    )
    assert not (storage / "r").exists()
