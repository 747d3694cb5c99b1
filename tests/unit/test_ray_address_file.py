"""The stale ``ray_current_cluster`` file: forgotten only when the cluster it names is gone."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from cluster.runtime import forget_dead_ray_address, ray_address_file


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_address_nothing_listens_on_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "ray_current_cluster"
    address = f"127.0.0.1:{_closed_port()}"
    path.write_text(address)
    assert forget_dead_ray_address(path) == address
    assert not path.exists()


def test_a_live_cluster_address_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ray_current_cluster"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        path.write_text(address + "\n")
        assert forget_dead_ray_address(path) is None
    assert path.read_text().strip() == address


def test_no_file_is_nothing_to_do(tmp_path: Path) -> None:
    assert forget_dead_ray_address(tmp_path / "ray_current_cluster") is None


def test_the_file_follows_rays_temp_dir_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "platform", "linux")  # Ray reads TMPDIR on Linux only
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    assert ray_address_file() == Path("/tmp/ray/ray_current_cluster")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    assert ray_address_file() == tmp_path / "t" / "ray" / "ray_current_cluster"
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "r"))
    assert ray_address_file() == tmp_path / "r" / "ray" / "ray_current_cluster"
