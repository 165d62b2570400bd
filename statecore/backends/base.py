"""The keyed state backend contract.

A backend holds the state of one key-group range. It keeps the current key (set by the runtime
before each record), hands out state handles bound to it, and moves state in and out per key group
as Arrow tables with the snapshot columns ``key``, ``namespace``, [``user_key``], ``value``:
the format is backend-independent, so a snapshot from one backend restores into the other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from statecore.descriptors import StateDescriptor
from statecore.errors import KeyGroupOutOfRangeError, StateAccessError, StateDescriptorConflictError
from statecore.keygroups import Key, KeyGroupRange, assign_to_key_group
from statecore.state import VOID_NAMESPACE, State
from statecore.types import TypeInfo

__all__ = ["KeyedStateBackend", "RestoreSource", "snapshot_schema"]

RestoreSource = Callable[[StateDescriptor], Iterable[tuple[int, pa.Table]]]
"""Yields ``(key_group, rows)`` of one state's snapshot, for the backend's key groups only."""

_KG_CACHE_LIMIT = 1 << 20


def snapshot_schema(key_type: TypeInfo, descriptor: StateDescriptor) -> pa.Schema:
    """The Arrow schema of one state's snapshot rows (without the ``key_group`` partition)."""
    fields = [pa.field("key", key_type.arrow, nullable=False),
              pa.field("namespace", pa.string(), nullable=False)]
    if descriptor.user_key_info is not None:
        fields.append(pa.field("user_key", descriptor.user_key_info.arrow, nullable=False))
    fields.append(pa.field("value", descriptor.value_info.arrow))
    return pa.schema(fields)


class KeyedStateBackend(ABC):
    """State for the keys of one key-group range; see the module docstring."""

    def __init__(
        self,
        *,
        key_type: TypeInfo,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        restore_source: RestoreSource | None = None,
    ) -> None:
        self.key_type = key_type
        self.key_group_range = key_group_range
        self.max_parallelism = max_parallelism
        self._restore_source = restore_source
        self._descriptors: dict[str, StateDescriptor] = {}
        self._states: dict[str, State] = {}
        self._kg_cache: dict[Key, int] = {}
        self._key: Any = None
        self._kg: int | None = None

    # -- the current key -------------------------------------------------------------------
    @property
    def current_key(self) -> Any:
        if self._kg is None:
            raise StateAccessError("no current key: keyed state is only available per record")
        return self._key

    @property
    def current_key_group(self) -> int:
        if self._kg is None:
            raise StateAccessError("no current key: keyed state is only available per record")
        return self._kg

    def set_current_key(self, key: Key, key_group: int | None = None) -> None:
        """Make ``key`` current; ``key_group`` may be passed when already computed (by Spark)."""
        if key_group is None:
            key_group = self._kg_cache.get(key)
            if key_group is None:
                key_group = assign_to_key_group(key, self.max_parallelism)
                if len(self._kg_cache) >= _KG_CACHE_LIMIT:
                    self._kg_cache.clear()
                self._kg_cache[key] = key_group
        r = self.key_group_range
        if not r.start <= key_group <= r.end:
            raise KeyGroupOutOfRangeError(
                f"key {key!r} is in key group {key_group}, outside this backend's key groups "
                f"{r.start}..{r.end} (max parallelism {self.max_parallelism})"
            )
        self._key = key
        self._kg = key_group

    # -- states ----------------------------------------------------------------------------
    def get_partitioned_state(self, descriptor: StateDescriptor) -> State:
        """The state for ``descriptor``: created once per name, then the same handle."""
        known = self._descriptors.get(descriptor.name)
        if known is not None:
            if known.kind is not descriptor.kind or known.describe() != descriptor.describe():
                raise StateDescriptorConflictError(
                    f"state {descriptor.name!r} is registered as {known.kind.value} "
                    f"{known.describe()}; cannot register it again as {descriptor.kind.value} "
                    f"{descriptor.describe()}"
                )
            return self._states[descriptor.name]
        state = self._create_state(descriptor)
        self._descriptors[descriptor.name] = descriptor
        self._states[descriptor.name] = state
        if self._restore_source is not None:
            for key_group, rows in self._restore_source(descriptor):
                self.restore_key_group(descriptor.name, key_group, rows)
        return state

    @property
    def descriptors(self) -> dict[str, StateDescriptor]:
        return dict(self._descriptors)

    def descriptor(self, name: str) -> StateDescriptor:
        from statecore.errors import UnknownStateError

        try:
            return self._descriptors[name]
        except KeyError:
            raise UnknownStateError(
                f"unknown state {name!r}; registered: {sorted(self._descriptors)}"
            ) from None

    def apply_to_all_keys(
        self,
        descriptor: StateDescriptor,
        function: Callable[[Any, State], None],
        namespace: str = VOID_NAMESPACE,
    ) -> None:
        """Call ``function(key, state)`` for every key with a value in ``namespace``."""
        state = self.get_partitioned_state(descriptor)
        state.set_current_namespace(namespace)
        for key in list(self.keys(descriptor.name, namespace)):
            self.set_current_key(key)
            function(key, state)

    # -- what a backend implements ---------------------------------------------------------
    @abstractmethod
    def _create_state(self, descriptor: StateDescriptor) -> State: ...

    @abstractmethod
    def keys(self, state_name: str, namespace: str = VOID_NAMESPACE) -> Iterator[Any]:
        """Every key with a value for ``state_name`` in ``namespace``."""

    @abstractmethod
    def changed_key_groups(self, state_name: str) -> set[int]:
        """Key groups written since the last :meth:`mark_snapshotted`."""

    @abstractmethod
    def mark_snapshotted(self) -> None:
        """Forget which key groups changed (after a snapshot was taken)."""

    @abstractmethod
    def snapshot_key_group(self, state_name: str, key_group: int) -> pa.Table:
        """The rows of one key group (``snapshot_schema``), possibly empty."""

    @abstractmethod
    def restore_key_group(self, state_name: str, key_group: int, rows: pa.Table) -> None:
        """Load the snapshot rows of one key group of a registered state."""

    def close(self) -> None:
        """Release resources (files, handles)."""
