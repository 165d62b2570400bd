"""statecore's keyed state against the reference model: every primitive over several keys and
namespaces, mutations of values read, TTL under a manual clock, and checkpoint / restore /
rescale (also past the max parallelism) / backend switches."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecore.backends import backend_names
from statecore.ttl import StateTtlConfig, StateVisibility, UpdateType

from .keyed import programs, run

PROFILE = settings.get_profile("reference_model")
BACKENDS = sorted(backend_names())


@pytest.mark.parametrize("backend", BACKENDS)
@settings(PROFILE)
@given(program=programs())
def test_reference_model_keyed_primitives(backend: str, program: list[tuple[Any, ...]]) -> None:
    run(program, backend=backend)


TTL_CONFIGS = st.builds(
    lambda update, visibility: StateTtlConfig(
        ttl=timedelta(milliseconds=10), update_type=update, visibility=visibility
    ),
    st.sampled_from(list(UpdateType)),
    st.sampled_from(list(StateVisibility)),
)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(PROFILE)
@given(ttl=TTL_CONFIGS, program=programs(merges=False, ttl=True))
def test_reference_model_ttl(
    backend: str, ttl: StateTtlConfig, program: list[tuple[Any, ...]]
) -> None:
    run(program, backend=backend, ttl=ttl)


@settings(PROFILE)
@given(
    start=st.sampled_from(["heap", "rocksdb"]),
    parallelism=st.integers(1, 3),
    ttl=st.one_of(st.none(), TTL_CONFIGS),
    data=st.data(),
)
def test_reference_model_checkpoint_restore_rescale(
    start: str, parallelism: int, ttl: StateTtlConfig | None, data: st.DataObject
) -> None:
    program = data.draw(programs(merges=ttl is None, ttl=ttl is not None, restores=True))
    run(program, backend=start, ttl=ttl, parallelism=parallelism, max_parallelism=4)
