"""Latency tracking switches a sampled record's states to timed subclasses: every keyed state
class is slotted, as on an object with a ``__dict__`` the switch would turn its attribute loads
into dictionary look-ups for good (about 15 % of a heap record)."""

from __future__ import annotations

from datetime import timedelta

from statecore.backends import KeyedStateBackend
from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.ttl import StateTtlConfig
from statecore.types import PICKLED


class Mean(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


def test_latency_tracking_finds_every_keyed_state_slotted(backend: KeyedStateBackend) -> None:
    ttl = StateTtlConfig(ttl=timedelta(hours=1))
    descriptors = [
        descriptor
        for config in (None, ttl)
        for descriptor in (
            ValueStateDescriptor(f"v{bool(config)}", int, ttl=config),
            ListStateDescriptor(f"l{bool(config)}", int, ttl=config),
            MapStateDescriptor(f"m{bool(config)}", str, int, ttl=config),
            ReducingStateDescriptor(f"r{bool(config)}", lambda a, b: a + b, int, ttl=config),
            AggregatingStateDescriptor(f"a{bool(config)}", Mean(), PICKLED, ttl=config),
        )
    ]
    for descriptor in descriptors:
        state = backend.get_partitioned_state(descriptor)
        assert not hasattr(state, "__dict__"), type(state).__name__
