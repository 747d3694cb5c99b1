"""Whom a grpo or online-dpo model played in its own games, read from the config record its phase
folder keeps beside ``model/`` (:data:`pipelines.common.config_record.CONFIG_RECORD`), so that
``evaluate`` can name them and say when a match is partly in-distribution.

>>> import json, tempfile
>>> run = Storage.from_uri(tempfile.mkdtemp())
>>> run.write_text("grpo/phase-config.json", json.dumps({"grpo.own_positions": 0.25,
...     "grpo.own_opponent": "random+start", "grpo.policy": run.uri_of("sft-board/model")}))
>>> opponents = training_opponents(run.uri_of("grpo/model"))
>>> opponents == ["random", "lm:" + run.uri_of("sft-board/model")]
True
>>> grpo, start = parse_player_spec("lm:" + run.uri_of("grpo/model")), parse_player_spec(opponents[1])
>>> for note in in_distribution_notes([grpo, start], {grpo.label: opponents}):
...     print(note.replace(run.uri, "RUN"))
note: lm:RUN/grpo/model trained against lm:RUN/sft-board/model (its own-games opponent): this match is partly in-distribution
>>> training_opponents(run.uri_of("sft-board/model"))  # no record there: an sft model
[]
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from chessrl.arena.players import PlayerSpec, parse_player_spec
from cluster.errors import UserError
from cluster.storage import Storage
from pipelines.common.artifacts import sft_folder
from pipelines.common.config_record import CONFIG_RECORD


def training_record(model_path: str) -> dict[str, Any]:
    """The config record of the phase that wrote the model at ``model_path`` (in the folder above
    it), or ``{}``: none there, unreadable, or not a record."""
    try:
        model = Storage.from_uri(model_path)
        phase = dataclasses.replace(model, root=posixpath.dirname(model.root.rstrip("/")))
        if not phase.exists(CONFIG_RECORD):
            return {}
        record = json.loads(phase.read_text(CONFIG_RECORD))
    except (UserError, OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def training_opponents(model_path: str) -> list[str]:
    """Whom the model at ``model_path`` played in its own games (grpo's, or online DPO's: grpo
    with loss dpo; ``grpo.own_positions`` above 0): ``self``, ``random`` and its frozen start as
    ``lm:PATH`` (``grpo.policy``, else the run's sft model of its text format beside the phase
    folder; ``start`` where that is not there). ``[]`` without a record or own games."""
    record = training_record(model_path)
    try:
        own = float(record.get("grpo.own_positions") or 0)
    except (TypeError, ValueError):
        return []
    if own <= 0:
        return []
    names = str(record.get("grpo.own_opponent") or "self").split("+")
    return [_start(model_path, record) if name == "start" else name for name in names]


def _start(model_path: str, record: Mapping[str, Any]) -> str:
    """The frozen start of the model's grpo run as an ``lm:`` player, or ``start`` if unknown."""
    if record.get("grpo.policy"):
        return f"lm:{record['grpo.policy']}"
    try:
        model = Storage.from_uri(model_path)
        run = dataclasses.replace(model, root=posixpath.dirname(posixpath.dirname(model.root.rstrip("/"))))
        sft = run.child(sft_folder(str(record.get("grpo.text_format") or "rookworld"))).child("model")
        return f"lm:{sft.uri}" if sft.exists("config.json") else "start"
    except (UserError, OSError):
        return "start"


def in_distribution_notes(
    specs: Sequence[PlayerSpec], opponents: Mapping[str, list[str]], sft_model: str | None = None
) -> list[str]:
    """For a two-player match: one line for each player that trained against the other (``random``,
    or its start: the same model path; ``sft`` is ``sft_model``), from ``opponents`` (label ->
    :func:`training_opponents`)."""
    notes = []
    for me, other in ((specs[0], specs[1]), (specs[1], specs[0])) if len(specs) == 2 else ():
        path = sft_model if other.kind == "sft" else str(other.path) if other.kind == "lm" else None
        for opponent in opponents.get(me.label, []):
            if _same_player(opponent, other.kind, path):
                notes.append(
                    f"note: {me.label} trained against {other.label} (its own-games opponent): "
                    "this match is partly in-distribution"
                )
    return notes


def _same_player(opponent: str, kind: str, path: str | None) -> bool:
    """Whether a :func:`training_opponents` entry is the player of ``kind`` with model ``path``."""
    if opponent == "random":
        return kind == "random"
    if not opponent.startswith("lm:") or path is None:
        return False
    return _where(path) == _where(str(parse_player_spec(opponent).path))


def _where(path: str) -> str:
    try:
        return Storage.from_uri(path).uri
    except UserError:
        return path
