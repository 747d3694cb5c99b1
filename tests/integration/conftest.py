"""One embedded local Ray for the whole integration session (phases join it as 'existing')."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster.config import RaySection
from cluster.runtime import RayInfo, ray_session


@pytest.fixture(scope="session")
def local_ray() -> Iterator[RayInfo]:
    with ray_session(RaySection(num_cpus=2, object_store_gb=1)) as info:
        yield info
