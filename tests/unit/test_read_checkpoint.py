"""``read_checkpoint``: a remote Ray Train checkpoint is read from a download of this process's
own, not from Ray's one folder per checkpoint that every process of the machine shares (a second
worker's download over the first's files corrupted a resume from S3 in the two-node test)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs
from ray.train import Checkpoint

from pipelines.learner import read_checkpoint


def saved(tmp_path) -> str:
    folder = tmp_path / "checkpoint_000001"
    folder.mkdir()
    (folder / "learner.pt").write_bytes(b"weights")
    return str(folder)


def test_a_remote_checkpoint_is_read_from_a_folder_of_its_own(tmp_path):
    # a filesystem that is not pyarrow's LocalFileSystem is downloaded, as S3 is
    remote = pyarrow.fs.SubTreeFileSystem(str(tmp_path), pyarrow.fs.LocalFileSystem())
    checkpoint = Checkpoint("checkpoint_000001", filesystem=remote)
    saved(tmp_path)
    shared = checkpoint._get_temporary_checkpoint_dir()
    with read_checkpoint(checkpoint) as first:
        with read_checkpoint(checkpoint) as second:  # a second worker of the same machine
            assert first != second and shared not in (first, second)
            assert Path(second, "learner.pt").read_bytes() == b"weights"
        assert not os.path.exists(second)  # its copy is gone; the first worker's is untouched
        assert Path(first, "learner.pt").read_bytes() == b"weights"
    assert not os.path.exists(first) and not os.path.exists(shared)


def test_a_local_checkpoint_is_read_in_place(tmp_path):
    folder = saved(tmp_path)
    with read_checkpoint(Checkpoint.from_directory(folder)) as got:
        assert got == folder
    assert os.path.exists(os.path.join(folder, "learner.pt"))  # nothing of the saved run removed
