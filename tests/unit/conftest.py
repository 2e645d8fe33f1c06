"""Fixtures shared by the unit tests' concern folders."""

from pathlib import Path

import pytest

from specfleet_workshop.cachedir import cache_root
from specfleet_workshop.devcluster.binaries import COMPONENTS, find_binary


@pytest.fixture(scope="module")
def helm() -> Path:
    """The pinned helm that `specfleet dev build` made (the chart's tests render with it)."""
    found = find_binary(COMPONENTS["helm"], cache_root())
    if found is None:
        pytest.fail("the pinned helm is not built yet: run `specfleet dev build` first")
    return found
