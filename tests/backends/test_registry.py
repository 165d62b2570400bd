"""``BackendParameters`` and the backend registry: names, options, validation, construction."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest

from statecore.backends import (
    BackendParameters,
    HeapKeyedStateBackend,
    backend_names,
    create_backend,
)
from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from statecore.backends.scope import TaskScope
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange
from statecore.ttl import ManualTimeProvider
from statecore.types import TypeInfo


def make(parameters: BackendParameters, **kwargs: Any) -> Any:
    return create_backend(
        parameters,
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        **kwargs,
    )


def test_names_heap_first() -> None:
    assert backend_names() == ["heap", "rocksdb"]


def test_defaults_to_the_heap() -> None:
    parameters = BackendParameters()
    assert (parameters.name, parameters.options) == ("heap", None)
    assert isinstance(make(parameters), HeapKeyedStateBackend)


def test_rocksdb_gets_its_options_and_scope(tmp_path: Path) -> None:
    options = RocksDBOptions(value_cache_entries=0, local_directory=str(tmp_path))
    clock = ManualTimeProvider(5)
    scope = TaskScope(job="j", operator="main", subtask_index=0, checkpoint_id=1, home="unused")
    backend = make(
        BackendParameters(name="rocksdb", options=options), ttl_time_provider=clock, scope=scope
    )
    try:
        assert isinstance(backend, RocksDBKeyedStateBackend)
        assert backend.options is options
        assert backend.scope is scope
        assert backend.ttl_time_provider is clock
        assert Path(backend.directory).is_relative_to(tmp_path / "j" / "main")
    finally:
        backend.close()


def test_rocksdb_without_options_takes_the_defaults() -> None:
    backend = make(BackendParameters(name="rocksdb"))
    try:
        assert backend.options == RocksDBOptions()
    finally:
        backend.close()


def test_the_restore_source_is_passed_on() -> None:
    descriptor = ValueStateDescriptor("v", int)
    made = make(BackendParameters(name="heap"))
    state = made.get_partitioned_state(descriptor)
    made.set_current_key("a")
    state.update(7)
    rows = {kg: made.snapshot_key_group("v", kg) for kg in made.changed_key_groups("v")}
    restored = make(BackendParameters(), restore_source=lambda d: rows.items())
    handle = restored.get_partitioned_state(descriptor)
    restored.set_current_key("a")
    assert handle.value() == 7


@pytest.mark.parametrize("name", ["memory", "", "HEAP", None, 3])
def test_an_unknown_name_names_the_known_ones(name: Any) -> None:
    with pytest.raises(ConfigError, match="unknown state backend .*; known: heap, rocksdb"):
        BackendParameters(name=name)
    with pytest.raises(ConfigError, match="known: heap, rocksdb"):
        BackendParameters.of(name)


def test_options_must_fit_the_backend() -> None:
    with pytest.raises(ConfigError, match="'heap' takes no options, got RocksDBOptions"):
        BackendParameters(name="heap", options=RocksDBOptions())
    with pytest.raises(ConfigError, match="'rocksdb' takes RocksDBOptions, got dict"):
        BackendParameters.of("rocksdb", {"block_cache_size": 1 << 20})


def test_of_translates_keyed_process_arguments() -> None:
    options = RocksDBOptions(value_cache_entries=10)
    assert BackendParameters.of("heap") == BackendParameters()
    assert BackendParameters.of("rocksdb", options) == BackendParameters(
        name="rocksdb", options=options
    )
    given = BackendParameters(name="rocksdb", options=options)
    assert BackendParameters.of(given) is given
    with pytest.raises(ConfigError, match="cannot be combined with BackendParameters"):
        BackendParameters.of(given, options)


def test_frozen_keyword_only_and_picklable() -> None:
    parameters = BackendParameters(name="rocksdb", options=RocksDBOptions(value_cache_entries=3))
    with pytest.raises(FrozenInstanceError):
        parameters.name = "heap"  # type: ignore[misc]
    with pytest.raises(TypeError):
        BackendParameters("heap")  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(parameters)) == parameters  # shipped to Spark tasks
