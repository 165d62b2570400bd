"""State descriptors: a name, a type, and what a state kind needs (default, reduce or aggregate).

A descriptor is created once (usually in ``open()``) and handed to the runtime context, which
returns the state handle bound to the current key:

>>> total = ValueStateDescriptor("total", int, default=0)
>>> total.kind, total.value_info.arrow
(<StateKind.VALUE: 'value'>, DataType(int64))
>>> ListStateDescriptor("last_events", str).value_info.arrow
ListType(list<item: string>)
"""

from __future__ import annotations

import copy
import datetime
import decimal
import enum
import functools
import types
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from statecore.errors import ConfigError, PyFlinkSpelling
from statecore.ttl.config import StateTtlConfig
from statecore.types import TypeInfo, TypeSpec

__all__ = [
    "StateKind",
    "AggregateFunction",
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
]

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")


class StateKind(enum.Enum):
    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Flink's ``AggregateFunction``: an accumulator that values are added to."""

    @abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    @abstractmethod
    def merge(self, a: ACC, b: ACC) -> ACC: ...


@dataclass(frozen=True)
class StateDescriptor:
    """What every keyed state descriptor has: a unique name, a stored type, an optional TTL."""

    name: str
    kind: ClassVar[StateKind]

    enable_time_to_live = PyFlinkSpelling(
        "ValueStateDescriptor(name, type, ttl=StateTtlConfig(ttl=timedelta(...))): "
        "a TTL is a keyword argument of every descriptor"
    )
    get_name = PyFlinkSpelling("descriptor.name (an attribute)")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ConfigError(
                f"state name {self.name!r} must be a non-empty identifier (it names a table and "
                "a SQL view)"
            )

    @property
    def value_info(self) -> TypeInfo:
        """The type of the snapshot ``value`` column."""
        raise NotImplementedError

    @property
    def user_key_info(self) -> TypeInfo | None:
        """The type of the snapshot ``user_key`` column (MapState only)."""
        return None

    @property
    def ttl_config(self) -> StateTtlConfig | None:
        return getattr(self, "ttl", None)

    def same_functions(self, other: StateDescriptor) -> bool:
        """Whether ``other``'s functions (reduce, aggregate) are certainly this descriptor's:
        the same object, or, as a fresh copy is after pickling, the same code with the same
        defaults and closure values (or, for an object, the same class and attributes). Not
        certain is ``False``. A descriptor without functions: ``True``."""
        return True

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for the catalog."""
        out: dict[str, Any] = {"kind": self.kind.value, "value_type": str(self.value_info.arrow)}
        if self.user_key_info is not None:
            out["user_key_type"] = str(self.user_key_info.arrow)
        ttl = self.ttl_config
        if ttl is not None:
            out["ttl"] = ttl.describe()
        return out


_IMMUTABLE_SCALARS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    decimal.Decimal,
    datetime.date,
    datetime.time,
    datetime.timedelta,
)


def _immutable(value: Any) -> bool:
    if isinstance(value, _IMMUTABLE_SCALARS):
        return True
    if type(value) in (tuple, frozenset):
        return all(_immutable(v) for v in value)
    return False


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor):
    type: TypeSpec
    _: KW_ONLY
    default: Any = None
    ttl: StateTtlConfig | None = None
    kind: ClassVar[StateKind] = StateKind.VALUE

    @property
    def value_info(self) -> TypeInfo:
        return TypeInfo.of(self.type)

    @property
    def default_factory(self) -> Callable[[], Any] | None:
        """What a read of an unset key returns when the default is mutable: a fresh deep copy
        each time, as Flink copies the default through its serializer on every read, so that
        ``acc = s.value(); acc.append(x)`` never changes the default for other keys. ``None``
        when the default cannot be mutated (the read returns the default itself).

        >>> import pyarrow as pa
        >>> d = ValueStateDescriptor("seen", pa.list_(pa.int64()), default=[])
        >>> fresh = d.default_factory
        >>> fresh() == [] and fresh() is not fresh() and fresh() is not d.default
        True
        >>> ValueStateDescriptor("total", int, default=0).default_factory is None
        True
        """
        if _immutable(self.default):
            return None
        return functools.partial(copy.deepcopy, self.default)


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor):
    element_type: TypeSpec
    _: KW_ONLY
    ttl: StateTtlConfig | None = None
    kind: ClassVar[StateKind] = StateKind.LIST

    @property
    def element_info(self) -> TypeInfo:
        return TypeInfo.of(self.element_type)

    @property
    def value_info(self) -> TypeInfo:
        element = self.element_info
        return TypeInfo(pa.list_(element.arrow), pickled_elements=element.pickled)


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor):
    key_type: TypeSpec
    value_type: TypeSpec
    _: KW_ONLY
    ttl: StateTtlConfig | None = None
    kind: ClassVar[StateKind] = StateKind.MAP

    @property
    def user_key_info(self) -> TypeInfo:
        return TypeInfo.of(self.key_type)

    @property
    def value_info(self) -> TypeInfo:
        return TypeInfo.of(self.value_type)


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor):
    reduce_function: Callable[[Any, Any], Any] = field(compare=False)
    type: TypeSpec
    _: KW_ONLY
    ttl: StateTtlConfig | None = None
    kind: ClassVar[StateKind] = StateKind.REDUCING

    @property
    def value_info(self) -> TypeInfo:
        return TypeInfo.of(self.type)

    def same_functions(self, other: StateDescriptor) -> bool:
        return isinstance(other, ReducingStateDescriptor) and _same(
            self.reduce_function, other.reduce_function
        )


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor):
    aggregate_function: AggregateFunction[Any, Any, Any] = field(compare=False)
    accumulator_type: TypeSpec
    _: KW_ONLY
    ttl: StateTtlConfig | None = None
    kind: ClassVar[StateKind] = StateKind.AGGREGATING

    @property
    def value_info(self) -> TypeInfo:
        return TypeInfo.of(self.accumulator_type)

    def same_functions(self, other: StateDescriptor) -> bool:
        return isinstance(other, AggregatingStateDescriptor) and _same(
            self.aggregate_function, other.aggregate_function
        )


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` certainly behave alike (see ``same_functions``)."""
    if a is b:
        return True
    if isinstance(a, types.FunctionType) and isinstance(b, types.FunctionType):
        cells_a = tuple(c.cell_contents for c in a.__closure__ or ())
        cells_b = tuple(c.cell_contents for c in b.__closure__ or ())
        return (
            a.__code__ == b.__code__
            and a.__defaults__ == b.__defaults__
            and a.__kwdefaults__ == b.__kwdefaults__
            and len(cells_a) == len(cells_b)
            and all(_same(x, y) or _equal(x, y) for x, y in zip(cells_a, cells_b))
        )
    if isinstance(a, types.MethodType) and isinstance(b, types.MethodType):
        return _same(a.__func__, b.__func__) and _same(a.__self__, b.__self__)
    if type(a) is type(b) and hasattr(a, "__dict__"):  # e.g. an AggregateFunction
        return _equal(vars(a), vars(b))
    return False


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an object that cannot be compared is not certainly the same
        return False
