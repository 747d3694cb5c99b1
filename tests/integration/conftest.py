"""One embedded local Ray for the whole integration session (phases join it as 'existing'), and
an untrained tiny language model saved as a Hugging Face folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.config import RaySection
from cluster.runtime import RayInfo, ray_session


@pytest.fixture(scope="session")
def local_ray() -> Iterator[RayInfo]:
    with ray_session(RaySection(num_cpus=2, object_store_gb=1)) as info:
        yield info


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> Path:
    """An untrained tiny GPT-2 and the chess tokenizer, saved with ``save_pretrained``."""
    from chessrl.models import build_model

    folder = tmp_path_factory.mktemp("lm")
    model, tokenizer = build_model("tiny")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
