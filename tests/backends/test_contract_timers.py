"""The backend contract, timers: per key and namespace, deduplicated, deletable, snapshotted."""

from __future__ import annotations

import pytest

from statecore.backends import KeyedStateBackend
from statecore.backends.timers import MIN_WATERMARK, TimeDomain, Timer, timers_schema
from statecore.errors import StateAccessError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.ttl import ManualTimeProvider

from .conftest import START_MS, MakeBackend
from .contract import key_in_range

EVENT = TimeDomain.EVENT_TIME
PROCESSING = TimeDomain.PROCESSING_TIME


def register(
    backend: KeyedStateBackend,
    key: str,
    timestamp: int,
    namespace: str = "",
    domain: TimeDomain = EVENT,
) -> None:
    backend.set_current_key(key)
    if domain is EVENT:
        backend.timer_service.register_event_time_timer(timestamp, namespace)
    else:
        backend.timer_service.register_processing_time_timer(timestamp, namespace)


class TestEventTimeTimers:
    def test_fire_in_order_with_the_key_current(self, backend: KeyedStateBackend) -> None:
        for key, ts in (("c", 30), ("a", 10), ("b", 20), ("d", 40)):
            register(backend, key, ts)
        timers = backend.timer_service
        assert timers.current_watermark() == MIN_WATERMARK
        fired = []
        for timer in timers.advance_watermark(30):
            assert backend.current_key == timer.key
            fired.append((timer.timestamp, timer.key))
        assert fired == [(10, "a"), (20, "b"), (30, "c")]
        assert timers.current_watermark() == 30
        assert [t.key for t in timers.timers(EVENT)] == ["d"]
        assert list(timers.advance_watermark(35)) == []
        assert list(timers.advance_watermark(20)) == []  # the watermark never goes back
        assert timers.current_watermark() == 35

    def test_one_timer_per_key_namespace_timestamp(self, backend: KeyedStateBackend) -> None:
        register(backend, "a", 10)
        register(backend, "a", 10)
        register(backend, "a", 10, "w")
        register(backend, "b", 10)
        register(backend, "a", 10, domain=PROCESSING)
        assert len(backend.timer_service) == 4
        fired = list(backend.timer_service.advance_watermark(10))
        assert sorted((t.key, t.namespace) for t in fired) == [("a", ""), ("a", "w"), ("b", "")]
        assert all(t.time_domain is EVENT for t in fired)

    def test_delete(self, backend: KeyedStateBackend) -> None:
        register(backend, "a", 10)
        register(backend, "a", 20)
        register(backend, "a", 20, "w")
        backend.set_current_key("a")
        backend.timer_service.delete_event_time_timer(20)
        backend.timer_service.delete_event_time_timer(99)  # nothing to delete
        backend.timer_service.delete_processing_time_timer(10)  # other domain
        register(backend, "b", 20)
        fired = list(backend.timer_service.advance_watermark(100))
        assert sorted((t.timestamp, t.key, t.namespace) for t in fired) == [
            (10, "a", ""),
            (20, "a", "w"),
            (20, "b", ""),
        ]

    def test_delete_then_register_again_fires_once(self, backend: KeyedStateBackend) -> None:
        register(backend, "a", 10)
        backend.timer_service.delete_event_time_timer(10)
        backend.timer_service.register_event_time_timer(10)
        assert len(list(backend.timer_service.advance_watermark(10))) == 1

    def test_timers_registered_while_firing(self, backend: KeyedStateBackend) -> None:
        register(backend, "a", 10)
        fired = []
        for timer in backend.timer_service.advance_watermark(25):
            fired.append(timer.timestamp)
            if timer.timestamp < 25:  # a due timer fires in the same pass, a later one waits
                backend.timer_service.register_event_time_timer(timer.timestamp + 10)
        assert fired == [10, 20]
        assert [t.timestamp for t in backend.timer_service.timers(EVENT)] == [30]

    def test_needs_a_current_key_and_int_timestamps(self, backend: KeyedStateBackend) -> None:
        with pytest.raises(StateAccessError):
            backend.timer_service.register_event_time_timer(10)
        backend.set_current_key("a")
        with pytest.raises(StateAccessError):
            backend.timer_service.register_event_time_timer(10.5)  # type: ignore[arg-type]


class TestProcessingTimeTimers:
    def test_fire_by_the_clock(self, backend: KeyedStateBackend, clock: ManualTimeProvider) -> None:
        timers = backend.timer_service
        assert timers.current_processing_time() == START_MS
        register(backend, "a", START_MS + 100, domain=PROCESSING)
        register(backend, "b", START_MS + 50, domain=PROCESSING)
        register(backend, "c", START_MS + 100, domain=EVENT)
        assert list(timers.advance_processing_time()) == []
        clock.advance(100)
        fired = list(timers.advance_processing_time())
        assert fired == [
            Timer(START_MS + 50, "b", "", PROCESSING),
            Timer(START_MS + 100, "a", "", PROCESSING),
        ]
        assert [t.key for t in timers.timers(EVENT)] == ["c"]


class TestTimerSnapshots:
    def test_changed_key_groups(self, backend: KeyedStateBackend) -> None:
        timers = backend.timer_service
        register(backend, "a", 10)
        register(backend, "b", 10, domain=PROCESSING)
        kgs = {assign_to_key_group(k, 128) for k in "ab"}
        assert timers.changed_key_groups() == kgs
        timers.mark_snapshotted()
        assert timers.changed_key_groups() == set()
        list(timers.advance_watermark(10))  # firing removes a timer: a change
        assert timers.changed_key_groups() == {assign_to_key_group("a", 128)}

    def test_round_trip_split_by_key_group(
        self, backend: KeyedStateBackend, make_backend: MakeBackend, target_backend: str
    ) -> None:
        keys = [f"user-{i}" for i in range(30)]
        for i, key in enumerate(keys):
            register(backend, key, 1000 + i)
            register(backend, key, 2000 + i, "w", PROCESSING)
        tables = {}
        for kg in backend.key_group_range:
            rows = backend.timer_service.snapshot_key_group(kg)
            assert rows.schema == timers_schema(backend.key_type)
            if rows.num_rows:
                tables[kg] = rows
        assert sum(t.num_rows for t in tables.values()) == 60
        everything = {
            (t.key, t.timestamp, t.namespace, t.time_domain)
            for d in TimeDomain
            for t in backend.timer_service.timers(d)
        }
        restored = set()
        for half in (KeyGroupRange(0, 63), KeyGroupRange(64, 127)):
            part = make_backend(key_group_range=half, backend=target_backend)
            for kg, rows in tables.items():
                if kg in half:
                    part.timer_service.restore_key_group(kg, rows)
            assert part.timer_service.changed_key_groups() == set()
            fired = list(part.timer_service.advance_watermark(10_000)) + list(
                part.timer_service.advance_processing_time(10_000)
            )
            assert all(assign_to_key_group(t.key, 128) in half for t in fired)
            restored |= {(t.key, t.timestamp, t.namespace, t.time_domain) for t in fired}
        assert restored == everything

    def test_restore_outside_the_range_is_refused(self, make_backend: MakeBackend) -> None:
        source = make_backend()
        key = next(key_in_range(KeyGroupRange(64, 127)))
        register(source, key, 5)
        kg = assign_to_key_group(key, 128)
        part = make_backend(key_group_range=KeyGroupRange(0, 63))
        with pytest.raises(Exception, match="key group"):
            part.timer_service.restore_key_group(kg, source.timer_service.snapshot_key_group(kg))
