"""One loader for saved models: a language model (``policy``), a reward model (``reward``) or a
self-play network (``network``), from a local folder or file, ``file://`` or ``s3://``.

    from chessrl.arena.saved_models import check_saved_model, load_saved_model

    check_saved_model("runs/demo/sft/model", "policy")        # in a phase's check, before Ray
    model, tokenizer = load_saved_model("runs/demo/sft/model", "policy")
    model, tokenizer = load_playing_model("runs/demo/grpo/model")   # a language model or a scorer
    reward, tokenizer = load_saved_model("runs/demo/reward/model", "reward")
    net = load_saved_model("runs/demo/selfplay/best.pt", "network")

:func:`check_saved_model` is cheap (no model is built, no Ray): a transformers folder needs its
``config.json`` and readable weights (``model.safetensors``, the shards its index names, or
``pytorch_model.bin``): a safetensors file's 8-byte header length and JSON header are read and the
file must be as long as the header says; a PyTorch file (``pytorch_model.bin``, a network's
``.pt``) must be a zip archive whose directory reads, with a ``data.pkl`` in it. Anything wrong is
one :class:`~chessrl.lm.checkpoints.ModelLoadError` naming the file:

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "config.json"), "w") as f:
...     _ = f.write("{}")
>>> with open(os.path.join(folder, "model.safetensors"), "wb") as f:
...     _ = f.write(safetensors_bytes({"w": ("F32", [4], 16)})[:-6])
>>> check_saved_model(folder, "policy")
Traceback (most recent call last):
...
chessrl.lm.checkpoints.ModelLoadError: .../model.safetensors is not a readable safetensors file (truncated: 80 of 86 bytes); copy the model again or re-export it

An ``s3://`` model is checked the same way without downloading it: sizes from the listing, the
headers by ranged reads (pyarrow's random-access files). :func:`load_saved_model` checks, then
loads; a damaged file that passes the check still fails as one such line.
"""

from __future__ import annotations

import json
import struct
import zipfile
from typing import IO, Any

from cluster.errors import StorageError, UserError
from cluster.storage import Storage, split_uri

#: What :func:`load_saved_model` loads, by kind.
KINDS = ("policy", "reward", "network")

#: The weights files transformers reads, in the order it looks for them.
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)

#: safetensors refuses a header longer than this (its ``MAX_HEADER_SIZE``).
MAX_HEADER = 100_000_000

_AGAIN = "copy the model again or re-export it"


def load_saved_model(path: str, kind: str) -> Any:
    """The model saved at ``path``, checked first (:func:`check_saved_model`): ``policy`` ->
    ``(model, tokenizer)`` (:func:`chessrl.lm.checkpoints.load_pretrained`), ``reward`` -> ``(model,
    tokenizer)`` (:func:`chessrl.lm.checkpoints.load_reward_model`), ``network`` -> a
    :class:`~chessrl.search.network.PolicyValueNet` in eval mode on the CPU."""
    from chessrl.lm.checkpoints import load_pretrained, load_reward_model

    check_saved_model(path, kind)
    if kind == "policy":
        return load_pretrained(path)
    if kind == "reward":
        return load_reward_model(path)
    return _load_network(path)


def scorer_checkpoint(path: str) -> bool:
    """Whether the model saved at ``path`` is a scorer (a sequence classifier: ``chess-rl
    reward``'s output, or a grpo run that trained one) rather than a language model; only its
    ``config.json`` is read."""
    from chessrl.lm.checkpoints import checkpoint_config

    return any(
        a.endswith("ForSequenceClassification") for a in checkpoint_config(path).get("architectures") or []
    )


def load_playing_model(path: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a model that chooses moves: a language model (``policy``) or a
    scorer (``reward``: :class:`chessrl.rl.scorer_policy.ScorerPolicy` plays it), by what
    ``path``'s config says it is."""
    return load_saved_model(path, "reward" if scorer_checkpoint(path) else "policy")  # type: ignore[no-any-return]


def check_saved_model(path: str, kind: str) -> None:
    """Raise one :class:`~chessrl.lm.checkpoints.ModelLoadError` naming the file when the model at
    ``path`` cannot be read: a folder without ``config.json`` or weights, a weights file that is
    truncated or not what its name says, a network file that is missing or not a PyTorch file."""
    if kind not in KINDS:
        raise ValueError(f"unknown saved model kind {kind!r}; kinds: {', '.join(KINDS)}")
    if kind == "network":
        storage, name = split_uri(path)
        if not storage.exists(name):
            raise model_load_error(f"no network at {path}")
        _check_torch_file(storage, name, path, "copy the network again or re-export it")
        return
    folder = Storage.from_uri(path)
    if not folder.exists("config.json"):
        raise model_load_error(f"{path} is not a transformers checkpoint folder (no config.json)")
    for name in weights_files(folder, path):
        shown = f"{path.rstrip('/')}/{name}"
        if name.endswith(".safetensors"):
            _check_safetensors(folder, name, shown)
        else:
            _check_torch_file(folder, name, shown, _AGAIN)


def weights_files(folder: Storage, path: str) -> list[str]:
    """The weights files under ``folder`` that transformers would read: the first of
    :data:`WEIGHTS` present, or for an index every shard it names (each must be there)."""
    present = set(folder.list_files())
    first = next((name for name in WEIGHTS if name in present), None)
    if first is None:
        raise model_load_error(
            f"{path} has no weights file (model.safetensors or pytorch_model.bin); {_AGAIN}"
        )
    if not first.endswith(".index.json"):
        return [first]
    try:
        shards = sorted(set(json.loads(folder.read_text(first))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise model_load_error(
            f"{path.rstrip('/')}/{first} is not a readable weights index; {_AGAIN}"
        ) from None
    for shard in shards:
        if shard not in present:
            raise model_load_error(f"{path.rstrip('/')}/{shard} is missing (named in {first}); {_AGAIN}")
    return shards


def safetensors_problem(stream: IO[bytes], size: int) -> str | None:
    """What is wrong with a safetensors file of ``size`` bytes read from ``stream`` (its header
    only), or None: the 8-byte header length, the JSON header, and the file's length against the
    largest tensor end the header gives.

    >>> import io
    >>> data = safetensors_bytes({"w": ("F32", [2], 8)})
    >>> safetensors_problem(io.BytesIO(data), len(data)) is None
    True
    >>> safetensors_problem(io.BytesIO(data[:20]), 20)
    'truncated: 20 of at least 69 bytes'
    >>> safetensors_problem(io.BytesIO(b"<html>not weights</html>"), 24)
    'its header length, 8,029,423,821,061,908,540 bytes, is not a safetensors header'
    """
    if size < 8:
        return f"truncated: {size:,} of at least 8 bytes"
    (length,) = struct.unpack("<Q", stream.read(8))
    if length > MAX_HEADER:
        return f"its header length, {length:,} bytes, is not a safetensors header"
    if 8 + length > size:
        return f"truncated: {size:,} of at least {8 + length:,} bytes"
    try:
        header = json.loads(stream.read(length))
        end = max(
            (int(t["data_offsets"][1]) for key, t in header.items() if key != "__metadata__"), default=0
        )
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return "its header is not safetensors' JSON"
    if size < 8 + length + end:
        return f"truncated: {size:,} of {8 + length + end:,} bytes"
    return None


def torch_file_problem(stream: IO[bytes], size: int) -> str | None:
    """What is wrong with a file ``torch.save`` wrote (a zip archive holding ``data.pkl``), or
    None; an older, pickled file is left to ``torch.load``.

    >>> import io
    >>> torch_file_problem(io.BytesIO(b"not a torch file"), 16)
    'not a PyTorch file'
    """
    if size == 0:
        return "empty"
    head = stream.read(2)
    if head[:1] == b"\x80":  # a pickle: torch's legacy format
        return None
    if head != b"PK":
        return "not a PyTorch file"
    stream.seek(0)
    try:
        with zipfile.ZipFile(stream) as archive:  # reads the directory at the end of the file
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return f"truncated or damaged: {size:,} bytes and no readable zip directory"
    if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        return "a zip archive without the data.pkl of a PyTorch file"
    return None


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], int]]) -> bytes:
    """A safetensors file of zero-filled tensors, ``name -> (dtype, shape, bytes)``: for tests.

    >>> len(safetensors_bytes({"w": ("F32", [2], 8)}))
    77
    """
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def _check_safetensors(folder: Storage, name: str, shown: str) -> None:
    """:func:`safetensors_problem` of ``folder/name`` (a ranged read on S3), as a ModelLoadError."""
    problem = _read_problem(folder, name, safetensors_problem)
    if problem is not None:
        raise model_load_error(f"{shown} is not a readable safetensors file ({problem}); {_AGAIN}")


def _check_torch_file(folder: Storage, name: str, shown: str, again: str) -> None:
    """:func:`torch_file_problem` of ``folder/name``, as a ModelLoadError."""
    problem = _read_problem(folder, name, torch_file_problem)
    if problem is not None:
        raise model_load_error(f"{shown} is not a readable PyTorch file ({problem}); {again}")


def _read_problem(folder: Storage, name: str, problem: Any) -> str | None:
    """``problem(stream, size)`` on ``folder/name`` opened for random access."""
    size = folder.info(name).size
    try:
        with folder.fs.open_input_file(folder.path(name)) as stream:
            return problem(stream, stream.size() if size is None else size)
    except OSError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise StorageError(f"cannot read {folder.uri_of(name)}: {first}") from None


def _load_network(path: str) -> Any:
    """:func:`chessrl.search.network.load_network`, its errors as a ModelLoadError."""
    from chessrl.search.network import load_network

    try:
        return load_network(path)
    except StorageError as exc:
        raise model_load_error(str(exc)) from None


def model_load_error(message: str) -> UserError:
    """A :class:`chessrl.lm.checkpoints.ModelLoadError`, imported only on the way out: the checks
    themselves stay free of torch and transformers (a phase's check runs in a light driver)."""
    from chessrl.lm.checkpoints import ModelLoadError

    return ModelLoadError(message)
