"""The config record a phase keeps in its output folder, so that a phase run again under the same
``--run-name`` with another config says so before it resumes from what the earlier run wrote.

:func:`pipelines.common.phase.run_phase` does this for every phase::

    record = section_record("sft", config)
    note_config_change(folder, record, log)   # warns, naming the changed keys
    with recording_config(folder, record):    # kept there for the next run
        ...                                   # the phase
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.fs as pafs

from cluster.config import flatten
from cluster.errors import StorageError, UserError
from cluster.storage import Storage
from pipelines.config import ChessRLConfig

#: Not ``config.json``: a phase folder passed where a saved model is wanted must still fail as one.
CONFIG_RECORD = "phase-config.json"


def section_record(section: str, config: ChessRLConfig) -> dict[str, Any]:
    """What a phase's folder keeps of the config that wrote it: its section, flat, and the seed."""
    return {**flatten(getattr(config, section), prefix=f"{section}."), "run.seed": config.run.seed}


def note_config_change(folder: Storage, record: dict[str, Any], log: Callable[[str], None]) -> list[str]:
    """Warn when ``folder`` holds what a run with another config (:func:`section_record`) wrote:
    the phase resumes from it (a learner from its last checkpoint, a producer from its shards),
    so a run started again under the same ``--run-name`` with, say, another learning rate would
    silently continue the old one. Returns the changed keys (:func:`recording_config` then keeps
    this run's record there).

    >>> import tempfile
    >>> from cluster.config import load_config, resolve_preset
    >>> folder = Storage.from_uri(tempfile.mkdtemp()).child("sft")
    >>> cfg = load_config(ChessRLConfig, path=resolve_preset("tiny"))
    >>> note_config_change(folder, section_record("sft", cfg), print)  # nothing there yet
    []
    >>> with recording_config(folder, section_record("sft", cfg)):
    ...     folder.write_text("checkpoint_000001/weights", "...")
    >>> other = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"learning_rate": 0.5})})
    >>> note_config_change(folder, section_record("sft", other), print)  # doctest: +ELLIPSIS
    warning: .../sft was written by a run with another config (sft.learning_rate 0.003 -> 0.5); this run \
resumes from what is there. To start over, use a new --run-name or delete the folder.
    ['sft.learning_rate']
    >>> note_config_change(folder, section_record("sft", cfg), print)  # the same config: quiet
    []
    """
    if not folder.exists(CONFIG_RECORD):
        return []
    try:
        before = json.loads(folder.read_text(CONFIG_RECORD))
    except ValueError:  # cut short: nothing to compare with
        return []
    if not isinstance(before, dict):
        return []
    changed = sorted(k for k in record.keys() | before.keys() if record.get(k) != before.get(k))
    if changed:
        shown = ", ".join(f"{k} {before.get(k)} -> {record.get(k)}" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        log(
            f"warning: {folder.uri} was written by a run with another config ({shown}{more}); this run "
            "resumes from what is there. To start over, use a new --run-name or delete the folder."
        )
    return changed


@contextlib.contextmanager
def recording_config(folder: Storage | None, record: dict[str, Any]) -> Iterator[None]:
    """Keep ``record`` in ``folder`` (:data:`CONFIG_RECORD`) while the phase runs, for the next
    run's :func:`note_config_change`. A phase stopped by a user error before it wrote anything
    else puts back what was there: no folder where there was none (nothing written, as its bad
    input promises), the earlier run's record where there was one. Once it wrote something (a
    checkpoint, a shard), its own record stays, whatever stopped it.

    >>> import tempfile
    >>> from cluster.errors import ConfigError
    >>> root = Storage.from_uri(tempfile.mkdtemp())
    >>> def fails(folder, record, write=False):
    ...     try:
    ...         with recording_config(folder, record):
    ...             if write:
    ...                 folder.write_text("checkpoint_000001/weights", "...")
    ...             raise ConfigError("a mistake")
    ...     except ConfigError:
    ...         return folder.read_text(CONFIG_RECORD) if folder.exists(CONFIG_RECORD) else None
    >>> fails(root.child("new"), {"a": 1}), root.exists("new")  # nothing left behind
    (None, False)
    >>> with recording_config(root.child("old"), {"a": 1}):
    ...     root.child("old").write_text("checkpoint_000001/weights", "...")
    >>> json.loads(fails(root.child("old"), {"a": 2}))  # the earlier run's record put back
    {'a': 1}
    >>> json.loads(fails(root.child("old"), {"a": 3}, write=True))  # it wrote: its own record stays
    {'a': 3}
    """
    if folder is None:
        yield
        return

    def contents() -> dict[str, tuple[int, Any]]:
        infos = folder.fs.get_file_info(
            pafs.FileSelector(folder.path(), recursive=True, allow_not_found=True)
        )
        return {
            i.path: (i.size, i.mtime_ns) for i in infos if i.is_file and not i.path.endswith(CONFIG_RECORD)
        }

    existed = folder.exists()
    before = folder.read_text(CONFIG_RECORD) if existed and folder.exists(CONFIG_RECORD) else None
    files = contents() if existed else {}
    folder.write_text(CONFIG_RECORD, json.dumps(record, indent=1, sort_keys=True))
    try:
        yield
    except UserError:
        with contextlib.suppress(StorageError, OSError):  # (the storage may be why it stopped)
            if contents() == files:  # it wrote nothing of its own
                if not existed:
                    folder.delete("")
                elif before is not None:
                    folder.write_text(CONFIG_RECORD, before)
                else:
                    folder.delete(CONFIG_RECORD)
        raise
