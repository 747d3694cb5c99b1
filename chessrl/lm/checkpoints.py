"""Saved models read back: a transformers checkpoint folder, ``file://`` or ``s3://`` prefix made
local (:func:`checkpoint_folder`), its config alone (:func:`checkpoint_config`), the policy, the
reward model and the tokenizer loaded from it, every failure one :class:`ModelLoadError` line;
and the tokenizer config every export writes (:func:`make_tokenizer_config_generic`).

    model, tokenizer = load_pretrained("s3://bucket/runs/demo/sft/model")  # copied, then removed
    judge, tokenizer = load_reward_model("runs/demo/reward/model")
    config = checkpoint_config("runs/demo/grpo/model")                     # config.json alone

Weights are never downloaded at run time: a folder saved by transformers (``save_pretrained``) or
an ``s3://`` prefix holding one is all a loader reads.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from chessrl.lm.gelu import fuse_gelu
from chessrl.lm.tokenizer import add_prompt_start
from cluster.errors import UserError
from cluster.storage import Storage


class ModelLoadError(UserError):
    """A saved model (language model, reward model, self-play network) that cannot be read: one
    line naming the folder or file (see :mod:`chessrl.arena.saved_models`)."""


#: Files of a checkpoint that hold weights or training state: what a tokenizer's or config's read skips.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5")


def _local_path(path: str) -> Path | None:
    """The local folder ``path`` names (a plain path or ``file://``); None for a remote one (``s3://``)."""
    if "://" in path and not path.startswith("file://"):
        return None
    return Path(path.removeprefix("file://")).expanduser()


@contextmanager
def checkpoint_folder(path: str, *, cache_dir: str | None = None, weights: bool = True) -> Iterator[Path]:
    """A local folder holding the checkpoint at ``path`` (a folder, ``file://`` or ``s3://``) for
    the ``with`` block. A remote one is copied into ``cache_dir`` (kept) or into a temporary
    folder removed when the block ends; ``weights=False`` leaves its weight files behind (a
    tokenizer's read). A folder without ``config.json`` is a :class:`ModelLoadError`.

    >>> folder = tempfile.mkdtemp()
    >>> _ = Path(folder, "config.json").write_text('{"n_positions": 64}')
    >>> with checkpoint_folder(folder) as local:
    ...     local == Path(folder)
    True
    >>> checkpoint_config(folder)
    {'n_positions': 64}
    """
    local = _local_path(path)
    scratch = None
    if local is None:
        storage = Storage.from_uri(path)
        files = [name for name in storage.list_files() if weights or not name.endswith(WEIGHT_SUFFIXES)]
        if not files:
            raise ModelLoadError(f"no files under {path}: expected a folder saved with save_pretrained")
        if cache_dir is None:
            scratch = local = Path(tempfile.mkdtemp(prefix="chess-rl-model-"))
        else:
            local = Path(cache_dir)
        try:
            for name in files:
                (local / name).parent.mkdir(parents=True, exist_ok=True)
                (local / name).write_bytes(storage.read_bytes(name))
        except BaseException:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
    try:
        if not (local / "config.json").is_file():
            raise ModelLoadError(f"{path} is not a transformers checkpoint folder (no config.json)")
        yield local
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def checkpoint_config(path: str) -> dict[str, Any]:
    """The ``config.json`` of the checkpoint at ``path`` (a folder, ``file://`` or ``s3://``: only
    that file is read); no such file is a :class:`ModelLoadError`."""
    local = _local_path(path)
    if local is None:
        storage = Storage.from_uri(path)
        if not storage.exists("config.json"):
            if not storage.list_files():
                raise ModelLoadError(f"no files under {path}: expected a folder saved with save_pretrained")
            raise ModelLoadError(f"{path} is not a transformers checkpoint folder (no config.json)")
        text = storage.read_bytes("config.json").decode()
    else:
        if not (local / "config.json").is_file():
            raise ModelLoadError(f"{path} is not a transformers checkpoint folder (no config.json)")
        text = (local / "config.json").read_text()
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ModelLoadError(f"{path}/config.json is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}/config.json is not a JSON object")
    return config


def load_pretrained(path: str, *, cache_dir: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a saved folder or an ``s3://`` prefix holding one (copied into
    ``cache_dir`` and kept there, or into a temporary folder removed once both are loaded)."""
    with checkpoint_folder(path, cache_dir=cache_dir) as local:
        model = _from_pretrained(AutoModelForCausalLM, local, path, "")
        return model, load_tokenizer(str(local))


def load_reward_model(path: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a saved reward model (``AutoModelForSequenceClassification``,
    one label, the language model's tokenizer) from a folder or an ``s3://`` prefix; in eval
    mode, its GELUs fused (:func:`chessrl.lm.gelu.fuse_gelu`: it is scored in batches)."""
    from transformers import AutoModelForSequenceClassification

    with checkpoint_folder(path) as local:
        model = _from_pretrained(AutoModelForSequenceClassification, local, path, "the reward model ")
        if model.config.num_labels != 1:
            raise ModelLoadError(f"{path} has {model.config.num_labels} labels; a reward model has one")
        tokenizer = load_tokenizer(str(local))
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    fuse_gelu(model)
    return model.eval(), tokenizer


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _from_pretrained(auto_class: Any, local: Path, path: str, what: str) -> Any:
    """``auto_class.from_pretrained(local)``, any failure one :class:`ModelLoadError`: ``cannot
    load <what><path>: ...``, or for a damaged safetensors file (one that slipped past
    :func:`chessrl.arena.saved_models.check_saved_model`) a line naming that file."""
    from safetensors import SafetensorError

    try:
        return auto_class.from_pretrained(local)
    except SafetensorError as exc:
        shards = sorted(p.name for p in local.glob("*.safetensors"))
        name = f"{path.rstrip('/')}/{shards[0]}" if len(shards) == 1 else f"a weights file under {path}"
        raise ModelLoadError(
            f"{name} is not a readable safetensors file ({_first_line(exc)}); "
            "copy the model again or re-export it"
        ) from None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load {what}{path}: {_first_line(exc)}") from None


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved with a checkpoint (a pad token is added from EOS when it has none), set
    to encode prompts as the phases train (:func:`chessrl.lm.tokenizer.add_prompt_start`): a
    checkpoint saved before tokenizers carried their start token loads the same way."""
    with checkpoint_folder(path, weights=False) as local:
        try:
            tokenizer = AutoTokenizer.from_pretrained(local)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot load the tokenizer of {path}: {_first_line(exc)}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return add_prompt_start(tokenizer)


def make_tokenizer_config_generic(folder: str | Path) -> bool:
    """Point a saved ``tokenizer_config.json`` at the generic fast class, so ``AutoTokenizer``
    reads ``tokenizer.json`` as saved (start token and trailing-space rule included) instead of
    rebuilding it, as transformers' ``GPT2Tokenizer`` does from the vocabulary alone. Returns
    whether the file changed; a folder without ``tokenizer.json`` is left alone."""
    config_path = Path(folder) / "tokenizer_config.json"
    if not (Path(folder) / "tokenizer.json").is_file() or not config_path.is_file():
        return False
    config = json.loads(config_path.read_text())
    if config.get("tokenizer_class") in ("PreTrainedTokenizerFast", "TokenizersBackend"):
        return False
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2))
    return True
