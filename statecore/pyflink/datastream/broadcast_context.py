"""The contexts of PyFlink's broadcast process functions (``BroadcastProcessFunction``,
``KeyedBroadcastProcessFunction``) around statecore's (:mod:`statecore.runtime.broadcast`),
with PyFlink's spelling: ``ctx.timestamp()``, ``ctx.current_watermark()``,
``ctx.get_broadcast_state(descriptor)`` from a PyFlink ``MapStateDescriptor`` (values of a
``ROW``/``TUPLE``/``MAP``/``LIST`` type read back as PyFlink gives them), and on the keyed side
``ctx.timer_service()`` and ``ctx.get_current_key()``.

- :class:`ReadOnlyContext` / :class:`KeyedReadOnlyContext` (``process_element``): the broadcast
  state read-only (a write raises :class:`~statecore.errors.StateAccessError`, as in Flink).
- :class:`KeyedOnTimerContext` (``on_timer``): also ``time_domain()``.
- :class:`BroadcastContext` (``process_broadcast_element``): the broadcast state writable, and,
  beside a keyed stream, ``apply_to_keyed_state(descriptor, function)`` (Java's
  ``applyToKeyedState``, which PyFlink lacks): ``function(key, state)`` for every key with a
  value of that state.

>>> from statecore.pyflink.common import Types
>>> from statecore.pyflink.datastream.state import MapStateDescriptor
>>> from statecore.backends.operator import BroadcastState
>>> rules = MapStateDescriptor("rules", Types.STRING(), Types.TUPLE([Types.STRING(), Types.INT()]))
>>> raw = BroadcastState(rules.to_statecore())
>>> raw.put("r1", {"f0": "red", "f1": 3})  # a struct as a snapshot reads it back
>>> view = ReadOnlyBroadcastState(raw, rules)
>>> view.get("r1"), list(view.keys()), "r1" in view
(('red', 3), ['r1'], True)
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError, StateAccessError
from statecore.pyflink.common.types import to_python
from statecore.pyflink.datastream.converting import PyFlinkMapState, composite
from statecore.pyflink.datastream.state import StateDescriptor

__all__ = [
    "BroadcastContext",
    "KeyedOnTimerContext",
    "KeyedReadOnlyContext",
    "ReadOnlyBroadcastState",
    "ReadOnlyContext",
    "statecore_descriptor",
]


def statecore_descriptor(descriptor: Any) -> Any:
    """statecore's descriptor for a PyFlink one (a statecore descriptor passes unchanged)."""
    return descriptor.to_statecore() if isinstance(descriptor, StateDescriptor) else descriptor


def _infos(descriptor: Any) -> tuple[Any, Any]:
    return getattr(descriptor, "key_type_info", None), getattr(descriptor, "value_type_info", None)


class ReadOnlyBroadcastState:
    """PyFlink's ``ReadOnlyBroadcastState``: ``get``, ``contains``, ``items``, ``keys``,
    ``values``, ``is_empty``, ``[key]``, ``in`` and iteration over the keys; no writes."""

    __slots__ = ("_state", "_key_info", "_info", "_name")

    def __init__(self, state: Any, descriptor: Any) -> None:
        self._state = state
        self._key_info, self._info = _infos(descriptor)
        self._name = getattr(descriptor, "name", "?")

    def get(self, key: Any) -> Any:
        return to_python(self._state.get(key), self._info)

    def contains(self, key: Any) -> bool:
        return bool(self._state.contains(key))

    def items(self) -> Iterator[tuple[Any, Any]]:
        for key, value in self._state.items():
            yield to_python(key, self._key_info), to_python(value, self._info)

    def keys(self) -> Iterator[Any]:
        return (key for key, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (value for _, value in self.items())

    def is_empty(self) -> bool:
        return bool(self._state.is_empty())

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def _read_only(self, *args: Any) -> None:
        raise StateAccessError(
            f"broadcast state {self._name!r} is read-only in process_element and on_timer: "
            "write it in process_broadcast_element"
        )

    put = put_all = remove = clear = __setitem__ = __delitem__ = _read_only


class _BaseContext:
    """``BaseBroadcastProcessFunction.BaseContext``: the element's timestamp, the times and
    side outputs (``output``)."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def timestamp(self) -> int | None:
        """The element's event time (epoch ms; ``None`` without one), or the timer's."""
        return self._ctx.timestamp  # type: ignore[no-any-return]

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``output_tag``."""
        self._ctx.output(output_tag, value)


class ReadOnlyContext(_BaseContext):
    """``BroadcastProcessFunction.ReadOnlyContext`` (``process_element``): the broadcast state
    read-only; no key and no timers (a stream without ``key_by``)."""

    __slots__ = ()

    def current_processing_time(self) -> int:
        return self._ctx.timer_service.current_processing_time()  # type: ignore[no-any-return]

    def current_watermark(self) -> int:
        return self._ctx.timer_service.current_watermark()  # type: ignore[no-any-return]

    def get_broadcast_state(self, state_descriptor: Any) -> ReadOnlyBroadcastState:
        state = self._ctx.get_broadcast_state(statecore_descriptor(state_descriptor))
        return ReadOnlyBroadcastState(state, state_descriptor)

    def get_current_key(self) -> Any:
        raise PyFlinkUnsupportedError(
            "BroadcastProcessFunction.ReadOnlyContext has no key (a stream without key_by); "
            "key the stream and use a KeyedBroadcastProcessFunction "
            f"({COMING_FROM_PYFLINK})"
        )


class KeyedReadOnlyContext(ReadOnlyContext):
    """``KeyedBroadcastProcessFunction.ReadOnlyContext`` (``process_element``): also the key
    and its timers."""

    __slots__ = ()

    def get_current_key(self) -> Any:
        return self._ctx.current_key

    def timer_service(self) -> Any:
        return self._ctx.timer_service


class KeyedOnTimerContext(KeyedReadOnlyContext):
    """``KeyedBroadcastProcessFunction.OnTimerContext``: also the firing timer's domain."""

    __slots__ = ()

    def time_domain(self) -> Any:
        return self._ctx.time_domain


KeyedStateFunction = Callable[[Any, Any], None]
"""``function(key, state)`` of ``apply_to_keyed_state`` (or an object with ``process``)."""


class BroadcastContext(_BaseContext):
    """``BroadcastProcessFunction.Context`` / ``KeyedBroadcastProcessFunction.Context``
    (``process_broadcast_element``): the broadcast state writable; beside a keyed stream,
    :meth:`apply_to_keyed_state`. ``states`` is the keyed function's PyFlink runtime context
    (``None`` beside a stream without a key)."""

    __slots__ = ("_states",)

    def __init__(self, ctx: Any, states: Any = None) -> None:
        super().__init__(ctx)
        self._states = states

    def current_processing_time(self) -> int:
        return self._ctx.current_processing_time()  # type: ignore[no-any-return]

    def current_watermark(self) -> int:
        return self._ctx.current_watermark()  # type: ignore[no-any-return]

    def get_broadcast_state(self, state_descriptor: Any) -> Any:
        state = self._ctx.get_broadcast_state(statecore_descriptor(state_descriptor))
        key_info, info = _infos(state_descriptor)
        if composite(key_info) or composite(info):
            return PyFlinkMapState(state, key_info, info)
        return state

    def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
        """Call ``function(key, state)`` (or ``function.process(key, state)``) for every key
        of this instance with a value of the state ``state_descriptor`` names, that key
        current: Flink's ``applyToKeyedState``."""
        if self._states is None:
            raise PyFlinkUnsupportedError(
                "apply_to_keyed_state beside a stream without a key: key the stream "
                f"(key_by) and use a KeyedBroadcastProcessFunction ({COMING_FROM_PYFLINK})"
            )
        kind = type(state_descriptor).__name__
        getter = {
            "ValueStateDescriptor": self._states.get_state,
            "ListStateDescriptor": self._states.get_list_state,
            "MapStateDescriptor": self._states.get_map_state,
            "ReducingStateDescriptor": self._states.get_reducing_state,
            "AggregatingStateDescriptor": self._states.get_aggregating_state,
        }.get(kind)
        if getter is None:
            raise PyFlinkUnsupportedError(
                f"apply_to_keyed_state({state_descriptor!r}): give a state descriptor "
                f"(ValueStateDescriptor...) ({COMING_FROM_PYFLINK})"
            )
        state = getter(state_descriptor)
        call = getattr(function, "process", function)

        def visit(key: Any, _: Any) -> None:
            # a job keyed without a key type keys its state by the pickled key
            call(pickle.loads(key) if isinstance(key, bytes) else key, state)

        self._ctx.apply_to_keyed_state(statecore_descriptor(state_descriptor), visit)
