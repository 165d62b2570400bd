"""The keyed state backends a job selects by name, and :class:`BackendParameters` selecting one.

Everything that builds a keyed backend from a name (the Spark runtime per task, the jobs, the
benchmarks, the contract test suite) goes through :func:`create_backend`; adding a backend is
one entry in the registry. The RocksDB backend is imported when it is first created, so jobs on
the heap never load ``rocksdict``.

>>> from statecore.keygroups import KeyGroupRange
>>> from statecore.types import TypeInfo
>>> backend = create_backend(
...     BackendParameters(name="heap"),
...     key_type=TypeInfo.of(str),
...     key_group_range=KeyGroupRange(0, 127),
...     max_parallelism=128,
... )
>>> type(backend).__name__
'HeapKeyedStateBackend'
>>> BackendParameters(name="memory")
Traceback (most recent call last):
...
statecore.errors.ConfigError: unknown state backend 'memory'; known: heap, rocksdb
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from statecore.backends.base import KeyedStateBackend, RestoreSource
from statecore.backends.heap import HeapKeyedStateBackend
from statecore.backends.scope import TaskScope
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

if TYPE_CHECKING:
    from statecore.backends.rocksdb import RocksDBOptions

__all__ = ["BackendName", "BackendParameters", "BackendFactory", "backend_names", "create_backend"]

BackendName = Literal["heap", "rocksdb"]

BackendFactory = Callable[..., KeyedStateBackend]
"""``factory(key_type=, key_group_range=, max_parallelism=, restore_source=, ttl_time_provider=,
scope=, options=)``: the backend contract's arguments, the task's scope (``None`` outside a job)
and the backend's options (``None``: its defaults)."""


def _heap(*, scope: TaskScope | None, options: object, **contract: Any) -> KeyedStateBackend:
    return HeapKeyedStateBackend(**contract)


def _rocksdb(
    *, scope: TaskScope | None, options: RocksDBOptions | None, **contract: Any
) -> KeyedStateBackend:
    from statecore.backends.rocksdb import RocksDBKeyedStateBackend

    return RocksDBKeyedStateBackend(scope=scope, options=options, **contract)


def _rocksdb_options() -> type:
    from statecore.backends.rocksdb import RocksDBOptions

    return RocksDBOptions


@dataclass(frozen=True)
class _Registration:
    factory: BackendFactory
    options_class: Callable[[], type] | None = None
    """The class of the backend's options, imported on demand; ``None``: it takes none."""


_BACKENDS: dict[str, _Registration] = {
    "heap": _Registration(_heap),
    "rocksdb": _Registration(_rocksdb, _rocksdb_options),
}


def backend_names() -> list[str]:
    """The names a job may select, heap first."""
    return list(_BACKENDS)


@dataclass(frozen=True, kw_only=True)
class BackendParameters:
    """Which keyed state backend a job uses, and its options.

    ``name`` is ``"heap"`` (Python dicts in the worker) or ``"rocksdb"`` (an embedded RocksDB
    on the executor's local disk); ``options`` configure it (``RocksDBOptions`` for RocksDB,
    ``None`` for its defaults; the heap takes none).

    >>> from statecore.backends.rocksdb import RocksDBOptions
    >>> BackendParameters(name="rocksdb", options=RocksDBOptions(value_cache_entries=0)).name
    'rocksdb'
    >>> BackendParameters(name="heap", options=RocksDBOptions())
    Traceback (most recent call last):
    ...
    statecore.errors.ConfigError: state backend 'heap' takes no options, got RocksDBOptions
    """

    name: BackendName = "heap"
    options: RocksDBOptions | None = None

    def __post_init__(self) -> None:
        registration = _BACKENDS.get(self.name) if isinstance(self.name, str) else None
        if registration is None:
            raise ConfigError(
                f"unknown state backend {self.name!r}; known: {', '.join(backend_names())}"
            )
        options = self.options
        if options is None:
            return
        if registration.options_class is None:
            raise ConfigError(
                f"state backend {self.name!r} takes no options, got {type(options).__name__}"
            )
        expected = registration.options_class()
        if not isinstance(options, expected):
            raise ConfigError(
                f"state backend {self.name!r} takes {expected.__name__}, "
                f"got {type(options).__name__}"
            )

    @classmethod
    def of(cls, backend: str | BackendParameters, options: object = None) -> BackendParameters:
        """``keyed_process``'s ``backend=`` (a name or parameters) and ``backend_options=`` as
        one value, validated.

        >>> BackendParameters.of("heap")
        BackendParameters(name='heap', options=None)
        """
        if isinstance(backend, BackendParameters):
            if options is not None:
                raise ConfigError(
                    "backend_options cannot be combined with BackendParameters; "
                    "pass BackendParameters(name=..., options=...)"
                )
            return backend
        return cls(name=cast(BackendName, backend), options=cast("RocksDBOptions | None", options))


def create_backend(
    parameters: BackendParameters,
    *,
    key_type: TypeInfo,
    key_group_range: KeyGroupRange,
    max_parallelism: int,
    ttl_time_provider: TtlTimeProvider | None = None,
    restore_source: RestoreSource | None = None,
    scope: TaskScope | None = None,
) -> KeyedStateBackend:
    """A keyed backend of ``key_group_range`` as ``parameters`` select it; ``scope`` tells a
    backend that keeps local state between runs (RocksDB) where it runs (``None``: a temporary
    instance, removed on close)."""
    return _BACKENDS[parameters.name].factory(
        key_type=key_type,
        key_group_range=key_group_range,
        max_parallelism=max_parallelism,
        restore_source=restore_source,
        ttl_time_provider=ttl_time_provider,
        scope=scope,
        options=parameters.options,
    )
