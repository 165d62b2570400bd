"""PyFlink's broadcast state pattern: ``DataStream.broadcast(MapStateDescriptor, ...)`` gives a
:class:`BroadcastStream`; ``connect`` of a keyed stream (or of a stream without a key) with it
gives a :class:`BroadcastConnectedStream`, whose ``process`` takes a
``KeyedBroadcastProcessFunction`` (or a ``BroadcastProcessFunction``).

It runs on statecore's broadcast operator (:mod:`statecore.runtime.broadcast`), the one
``keyed_broadcast_process`` runs: the job's plan has two inputs, the stream (input 1) and the
broadcast stream, whose stateless stage gives every element once per task of the keyed stage
(a record of input 2 under a key of that task's key-group range,
:func:`~statecore.runtime.broadcast.instance_keys`), so each parallel instance sees every
broadcast element and keeps its own copy of the broadcast state (operator state, checkpointed
with the instance). Within a task the broadcast elements come first, as Flink's ``BATCH`` mode
processes the broadcast side first; with event time both inputs come in event-time order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.datastream import broadcast_context as contexts
from statecore.pyflink.datastream.connected_streams import two_input_plan
from statecore.pyflink.datastream.functions import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    RuntimeContext,
)
from statecore.pyflink.datastream.rich import NonKeyedRuntimeContext
from statecore.pyflink.datastream.state import MapStateDescriptor
from statecore.runtime import broadcast as sc_broadcast
from statecore.runtime import functions as sc

__all__ = ["BroadcastConnectedStream", "BroadcastFunctionRunner", "BroadcastStream"]


def _unsupported(what: str, instead: str) -> PyFlinkUnsupportedError:
    return PyFlinkUnsupportedError(f"{what}: {instead} ({COMING_FROM_PYFLINK})")


class BroadcastStream:
    """A stream whose elements reach every parallel instance of the function it is connected
    to, with the broadcast states ``descriptors`` (``DataStream.broadcast(...)``)."""

    def __init__(self, stream: Any, descriptors: tuple[Any, ...]) -> None:
        if not descriptors:
            raise _unsupported(
                "broadcast() without a MapStateDescriptor",
                "statecore runs the broadcast state pattern: broadcast(MapStateDescriptor(...)) "
                "and connect a stream to the BroadcastStream",
            )
        for descriptor in descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise _unsupported(
                    f"broadcast({descriptor!r})",
                    "give MapStateDescriptors (from statecore.pyflink.datastream.state import "
                    "MapStateDescriptor)",
                )
        plan = stream._plan
        if plan.keyed or plan.key_selector is not None or plan.inputs:
            raise _unsupported(
                "broadcast of a keyed stream, a union or connected streams",
                "broadcast a stream straight from its source (map, filter and flat_map first "
                "are fine)",
            )
        self.stream = stream
        self.descriptors = descriptors

    def get_execution_environment(self) -> Any:
        return self.stream.get_execution_environment()


class BroadcastFunctionRunner(sc_broadcast.KeyedBroadcastProcessFunction):
    """A PyFlink broadcast process function as statecore's: PyFlink's contexts around the
    runtime's; ``open`` gets the key's state beside a keyed stream (a non-keyed runtime
    context beside a stream without a key)."""

    def __init__(self, function: Any, *, keyed: bool) -> None:
        self.function = function
        self.keyed = keyed
        self._states: RuntimeContext | None = None

    def open(self, runtime_context: sc.RuntimeContext) -> None:
        if self.keyed:
            self._states = RuntimeContext(runtime_context)
            self.function.open(self._states)
        else:
            self.function.open(NonKeyedRuntimeContext(runtime_context))

    def process_element(
        self, value: Any, ctx: sc_broadcast.ReadOnlyContext
    ) -> Iterable[Any] | None:
        kind = contexts.KeyedReadOnlyContext if self.keyed else contexts.ReadOnlyContext
        return self.function.process_element(value, kind(ctx))  # type: ignore[no-any-return]

    def process_broadcast_element(
        self, value: Any, ctx: sc_broadcast.BroadcastContext
    ) -> Iterable[Any] | None:
        context = contexts.BroadcastContext(ctx, self._states)
        return self.function.process_broadcast_element(value, context)  # type: ignore[no-any-return]

    def on_timer(
        self, timestamp: int, ctx: sc_broadcast.ReadOnlyTimerContext
    ) -> Iterable[Any] | None:
        return self.function.on_timer(timestamp, contexts.KeyedOnTimerContext(ctx))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.function.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function, "keyed": self.keyed, "_states": None}


class BroadcastConnectedStream:
    """A stream connected to a :class:`BroadcastStream` (``stream.connect(broadcast_stream)``):
    ``process`` with a ``KeyedBroadcastProcessFunction`` (a keyed stream) or a
    ``BroadcastProcessFunction`` (a stream without a key)."""

    def __init__(self, non_broadcast_stream: Any, broadcast_stream: BroadcastStream) -> None:
        plan = non_broadcast_stream._plan
        if plan.keyed or plan.inputs:
            raise _unsupported(
                "connect of a BroadcastStream to a stream after a keyed function, a union or "
                "connected streams",
                "connect it to a stream straight from its source (or its key_by); statecore "
                "runs one keyed operator per job",
            )
        self.non_broadcast_stream = non_broadcast_stream
        self.broadcast_stream = broadcast_stream

    def process(self, func: Any, output_type: Any = None) -> Any:
        keyed = self.non_broadcast_stream._plan.key_selector is not None
        if isinstance(func, KeyedBroadcastProcessFunction):
            if not keyed:
                raise _unsupported(
                    "a KeyedBroadcastProcessFunction beside a stream without a key",
                    "key the stream (key_by) before connect, or give a BroadcastProcessFunction",
                )
        elif isinstance(func, BroadcastProcessFunction):
            if keyed:
                raise _unsupported(
                    "a BroadcastProcessFunction beside a keyed stream",
                    "give a KeyedBroadcastProcessFunction (from statecore.pyflink.datastream "
                    "import KeyedBroadcastProcessFunction)",
                )
        else:
            raise _unsupported(
                f"BroadcastConnectedStream.process({type(func).__name__})",
                "give a KeyedBroadcastProcessFunction or a BroadcastProcessFunction",
            )
        first = self.non_broadcast_stream._plan
        broadcast = dataclasses.replace(self.broadcast_stream.stream._plan, broadcast=True)
        states = tuple(d.to_statecore() for d in self.broadcast_stream.descriptors)
        function = sc_broadcast.KeyedBroadcastFunction(
            BroadcastFunctionRunner(func, keyed=keyed), states
        )
        plan = two_input_plan(first, broadcast, function, output_type)
        return self.non_broadcast_stream._with(plan)
