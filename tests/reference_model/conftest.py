"""The Hypothesis profile of the reference-model tests: ``STATECORE_FUZZ_EXAMPLES`` examples per
property (150 by default, ``make fuzz`` 20,000), derandomized so every run draws the same
programs, no deadline (a RocksDB instance takes milliseconds to open).

150, not 300, in ``make test``: the same properties over every primitive, both backends and the
explicit ``@example`` programs, at half the CPU (the 13 properties of the rest group took 452 s
at 300 on a loaded 2-core machine); the search for rare programs is ``make fuzz``'s."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from .keyed import SHM_DIR

settings.register_profile(
    "reference_model",
    max_examples=int(os.environ.get("STATECORE_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="session", autouse=True)
def _rocksdb_on_tmpfs() -> Iterator[None]:
    """Remove the tmpfs folder the RocksDB instances of the session were made in."""
    yield
    shutil.rmtree(SHM_DIR, ignore_errors=True)
