"""PyFlink's state descriptors and ``StateTtlConfig`` (``pyflink.datastream.state``), mapped
onto statecore's frozen descriptors and :class:`~statecore.ttl.StateTtlConfig`.

A PyFlink descriptor is mutable (``enable_time_to_live`` sets its TTL); ``to_statecore()``
builds statecore's descriptor when the runtime context hands out the state, so a state handle
is statecore's own and costs nothing extra per access.

>>> from statecore.pyflink.common import Time, Types
>>> ttl = (StateTtlConfig.new_builder(Time.seconds(10))
...        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
...        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
...        .cleanup_full_snapshot()
...        .build())
>>> descriptor = ValueStateDescriptor("count", Types.LONG())
>>> descriptor.enable_time_to_live(ttl)
>>> statecore_descriptor = descriptor.to_statecore()
>>> statecore_descriptor.ttl.ttl, statecore_descriptor.ttl.update_type.name
(datetime.timedelta(seconds=10), 'ON_READ_AND_WRITE')

What statecore cannot honour raises :class:`~statecore.errors.PyFlinkUnsupportedError`: the
RocksDB compaction-filter cleanup (``cleanup_incrementally`` is statecore's stand-in on both
backends) and more than one cleanup strategy at once. ``UpdateType.Disabled`` leaves TTL off,
as in Flink. Without a cleanup strategy expired values are removed when read (Flink also
cleans up in the background by default; statecore does only what a strategy says).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from statecore import descriptors as sc
from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.time import Time, to_timedelta
from statecore.pyflink.common.typeinfo import TypeInformation
from statecore.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    State,
    ValueState,
)
from statecore.ttl import config as ttl
from statecore.types import TypeSpec

__all__ = [
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
    "StateTtlConfig",
    "State",
    "ValueState",
    "ListState",
    "MapState",
    "ReducingState",
    "AggregatingState",
]

TypeLike = Any
"""A PyFlink ``Types.X()``, or any statecore type spec (``int``, a ``pyarrow.DataType``, ...)."""


def _spec(type_info: TypeLike) -> TypeSpec:
    if isinstance(type_info, TypeInformation):
        return type_info.spec
    return type_info  # a statecore TypeSpec, checked by statecore


def _element_spec(type_info: TypeLike) -> TypeSpec:
    """A list state's element type (``PICKLED_BYTE_ARRAY`` allowed)."""
    if isinstance(type_info, TypeInformation) and type_info.pickled:
        return type_info.spec
    return _spec(type_info)


class StateTtlConfig:
    """PyFlink's ``StateTtlConfig``, built by ``StateTtlConfig.new_builder(ttl)``;
    :meth:`to_statecore` is statecore's config (``None`` when TTL is disabled)."""

    class UpdateType(enum.Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(enum.Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(enum.Enum):
        ProcessingTime = 0

    class CleanupStrategies:
        """The cleanup the builder configured (PyFlink's ``CleanupStrategies``)."""

        class Strategies(enum.Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        def __init__(
            self, strategies: dict[Any, tuple[int, bool] | None], is_cleanup_in_background: bool
        ) -> None:
            self._strategies = dict(strategies)
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return self.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

    def __init__(
        self,
        update_type: StateTtlConfig.UpdateType,
        state_visibility: StateTtlConfig.StateVisibility,
        ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic,
        ttl: Time | timedelta,
        cleanup_strategies: StateTtlConfig.CleanupStrategies,
    ) -> None:
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Time | timedelta) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> StateTtlConfig.UpdateType:
        return self._update_type

    def get_state_visibility(self) -> StateTtlConfig.StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Time | timedelta:
        return self._ttl

    def get_ttl_time_characteristic(self) -> StateTtlConfig.TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not StateTtlConfig.UpdateType.Disabled

    def get_cleanup_strategies(self) -> StateTtlConfig.CleanupStrategies:
        return self._cleanup_strategies

    def to_statecore(self) -> ttl.StateTtlConfig | None:
        """statecore's TTL config; ``None`` for ``UpdateType.Disabled`` (no TTL)."""
        if not self.is_enabled():
            return None
        strategies = self._cleanup_strategies._strategies
        kinds = StateTtlConfig.CleanupStrategies.Strategies
        incremental = strategies.get(kinds.INCREMENTAL_CLEANUP)
        if incremental is not None:
            cleanup_size, every_record = incremental
            return self._statecore(ttl.CleanupStrategy.INCREMENTAL, cleanup_size, every_record)
        if kinds.FULL_STATE_SCAN_SNAPSHOT in strategies:
            return self._statecore(ttl.CleanupStrategy.FULL_SNAPSHOT)
        return self._statecore(ttl.CleanupStrategy.ON_READ)

    def _statecore(
        self, cleanup: ttl.CleanupStrategy, cleanup_size: int = 5, every_record: bool = False
    ) -> ttl.StateTtlConfig:
        on_read = self._update_type is StateTtlConfig.UpdateType.OnReadAndWrite
        expired = StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
        return ttl.StateTtlConfig(
            ttl=to_timedelta(self._ttl),
            update_type=_UPDATE[on_read],
            visibility=_VISIBILITY[self._state_visibility is expired],
            cleanup=cleanup,
            cleanup_size=cleanup_size,
            run_cleanup_for_every_record=every_record,
        )

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig<update_type={self._update_type}, state_visibility="
            f"{self._state_visibility}, ttl={self._ttl!r}>"
        )

    class Builder:
        """PyFlink's ``StateTtlConfig.Builder``."""

        def __init__(self, ttl: Time | timedelta) -> None:
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict[Any, tuple[int, bool] | None] = {}

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update_type = StateTtlConfig.UpdateType(update_type)
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(
            self, state_visibility: StateTtlConfig.StateVisibility
        ) -> StateTtlConfig.Builder:
            self._state_visibility = StateTtlConfig.StateVisibility(state_visibility)
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(
                StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
            )

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic
        ) -> StateTtlConfig.Builder:
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic(
                ttl_time_characteristic
            )
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(
                StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            )

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            self._strategies[
                StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT
            ] = None
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> StateTtlConfig.Builder:
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.INCREMENTAL_CLEANUP] = (
                cleanup_size,
                bool(run_cleanup_for_every_record),
            )
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int, periodic_compaction_time: Any = None
        ) -> StateTtlConfig.Builder:
            raise PyFlinkUnsupportedError(
                "cleanup_in_rocksdb_compact_filter: statecore's RocksDB backend has no TTL "
                "compaction filter; its stand-in is cleanup_incrementally(cleanup_size, "
                "run_cleanup_for_every_record), which walks the state in key order on both "
                f"backends ({COMING_FROM_PYFLINK})"
            )

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """Accepted: statecore cleans up in the background only as a strategy says."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Time | timedelta) -> StateTtlConfig.Builder:
            self._ttl = ttl
            return self

        def build(self) -> StateTtlConfig:
            if len(self._strategies) > 1:
                names = sorted(s.name for s in self._strategies)
                raise PyFlinkUnsupportedError(
                    f"StateTtlConfig with cleanup strategies {names}: statecore's TTL takes one "
                    "cleanup strategy per state (cleanup_full_snapshot() or "
                    f"cleanup_incrementally(...)) ({COMING_FROM_PYFLINK})"
                )
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                StateTtlConfig.CleanupStrategies(self._strategies, self._is_cleanup_in_background),
            )


_UPDATE = {False: ttl.UpdateType.ON_CREATE_AND_WRITE, True: ttl.UpdateType.ON_READ_AND_WRITE}
_VISIBILITY = {
    False: ttl.StateVisibility.NEVER_RETURN_EXPIRED,
    True: ttl.StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP,
}


class StateDescriptor:
    """What every PyFlink descriptor has: a name, its type information and an optional TTL."""

    def __init__(self, name: str, type_info: TypeLike) -> None:
        self.name = name
        self.type_info = type_info
        self._ttl_config: StateTtlConfig | None = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Give the state a TTL (checked now: what statecore cannot honour raises here)."""
        ttl_config.to_statecore()
        self._ttl_config = ttl_config

    @property
    def _ttl(self) -> ttl.StateTtlConfig | None:
        return None if self._ttl_config is None else self._ttl_config.to_statecore()

    def to_statecore(self) -> sc.StateDescriptor:
        """statecore's descriptor of this state."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type_info!r})"


class ValueStateDescriptor(StateDescriptor):
    """A value state's descriptor; an unset value reads as ``None``, as in PyFlink."""

    def __init__(self, name: str, value_type_info: TypeLike) -> None:
        super().__init__(name, value_type_info)

    def to_statecore(self) -> sc.ValueStateDescriptor:
        return sc.ValueStateDescriptor(self.name, _spec(self.type_info), ttl=self._ttl)


class ListStateDescriptor(StateDescriptor):
    def __init__(self, name: str, elem_type_info: TypeLike) -> None:
        super().__init__(name, elem_type_info)
        self.elem_type_info = elem_type_info

    def to_statecore(self) -> sc.ListStateDescriptor:
        return sc.ListStateDescriptor(self.name, _element_spec(self.elem_type_info), ttl=self._ttl)


class MapStateDescriptor(StateDescriptor):
    def __init__(self, name: str, key_type_info: TypeLike, value_type_info: TypeLike) -> None:
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info

    def to_statecore(self) -> sc.MapStateDescriptor:
        return sc.MapStateDescriptor(
            self.name, _spec(self.key_type_info), _spec(self.value_type_info), ttl=self._ttl
        )


class ReducingStateDescriptor(StateDescriptor):
    """``reduce_function`` is a ``ReduceFunction`` (its ``reduce``) or a callable of two values."""

    def __init__(self, name: str, reduce_function: Any, type_info: TypeLike) -> None:
        super().__init__(name, type_info)
        reduce = getattr(reduce_function, "reduce", reduce_function)
        if not callable(reduce):
            raise TypeError("The input must be a ReduceFunction or a callable function!")
        self._reduce_function = reduce_function
        self._reduce: Callable[[Any, Any], Any] = reduce

    def get_reduce_function(self) -> Any:
        return self._reduce_function

    def to_statecore(self) -> sc.ReducingStateDescriptor:
        return sc.ReducingStateDescriptor(
            self.name, self._reduce, _spec(self.type_info), ttl=self._ttl
        )


class AggregatingStateDescriptor(StateDescriptor):
    """``agg_function`` is an ``AggregateFunction`` (statecore's, which PyFlink's is)."""

    def __init__(
        self,
        name: str,
        agg_function: sc.AggregateFunction[Any, Any, Any],
        state_type_info: TypeLike,
    ) -> None:
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, sc.AggregateFunction):
            raise TypeError("The input must be a pyflink.datastream.functions.AggregateFunction!")
        self._agg_function = agg_function

    def get_agg_function(self) -> sc.AggregateFunction[Any, Any, Any]:
        return self._agg_function

    def to_statecore(self) -> sc.AggregatingStateDescriptor:
        return sc.AggregatingStateDescriptor(
            self.name, self._agg_function, _spec(self.type_info), ttl=self._ttl
        )
