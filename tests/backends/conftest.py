"""The backends the contract suite runs over: every backend of the registry
(:mod:`statecore.backends.registry`), built by ``create_backend`` as the Spark runtime builds them.

Registering a backend is all it takes; every test in ``test_contract*.py`` then runs on it, and
snapshot tests also restore across every pair of backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from statecore.backends import (
    BackendParameters,
    KeyedStateBackend,
    backend_names,
    create_backend,
)
from statecore.backends.base import RestoreSource
from statecore.keygroups import KeyGroupRange
from statecore.ttl import ManualTimeProvider
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

BACKENDS = backend_names()

START_MS = 1_700_000_000_000


class MakeBackend:
    """Creates backends of one kind with the contract's defaults, and closes them afterwards."""

    def __init__(self, name: str, clock: TtlTimeProvider) -> None:
        self.name = name
        self.clock = clock
        self.created: list[KeyedStateBackend] = []

    def __call__(
        self,
        *,
        key_type: TypeInfo | None = None,
        key_group_range: KeyGroupRange = KeyGroupRange(0, 127),
        max_parallelism: int = 128,
        restore_source: RestoreSource | None = None,
        ttl_time_provider: TtlTimeProvider | None = None,
        backend: str | None = None,
    ) -> KeyedStateBackend:
        made = create_backend(
            BackendParameters.of(backend or self.name),
            key_type=key_type or TypeInfo.of(str),
            key_group_range=key_group_range,
            max_parallelism=max_parallelism,
            restore_source=restore_source,
            ttl_time_provider=ttl_time_provider or self.clock,
        )
        self.created.append(made)
        return made


@pytest.fixture(params=sorted(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> ManualTimeProvider:
    """The fake processing-time clock every backend of a test reads."""
    return ManualTimeProvider(START_MS)


@pytest.fixture
def make_backend(backend_name: str, clock: ManualTimeProvider) -> Iterator[MakeBackend]:
    maker = MakeBackend(backend_name, clock)
    yield maker
    for made in maker.created:
        made.close()


@pytest.fixture
def backend(make_backend: MakeBackend) -> KeyedStateBackend:
    """A backend of all 128 key groups, string keys."""
    return make_backend()


def pytest_generate_tests(metafunc: Any) -> None:
    """``target_backend``: every backend, for restores across backends."""
    if "target_backend" in metafunc.fixturenames:
        metafunc.parametrize("target_backend", sorted(BACKENDS))
