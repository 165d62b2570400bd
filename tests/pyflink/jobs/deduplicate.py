"""Emits each (key, event id) once: the ids a key has seen are kept in a MapState with the
processing time they were first seen, and a processing-time timer forgets each an hour later.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types
from statecore.pyflink.common import Types

# from pyflink.datastream import KeyedProcessFunction, RuntimeContext, TimeDomain
from statecore.pyflink.datastream import KeyedProcessFunction, RuntimeContext, TimeDomain

# from pyflink.datastream.state import MapStateDescriptor
from statecore.pyflink.datastream.state import MapStateDescriptor

RETENTION = 60 * 60 * 1000  # ms


class Deduplicate(KeyedProcessFunction):
    def __init__(self):
        self.seen = None

    def open(self, runtime_context: RuntimeContext):
        self.seen = runtime_context.get_map_state(
            MapStateDescriptor("seen", Types.STRING(), Types.LONG())
        )

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        event_id = value[1]
        if self.seen.contains(event_id):
            return
        now = ctx.timer_service().current_processing_time()
        self.seen.put(event_id, now)
        ctx.timer_service().register_processing_time_timer(now + RETENTION)
        yield value

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        assert ctx.time_domain() == TimeDomain.PROCESSING_TIME
        expired = [k for k, seen_at in self.seen.items() if seen_at + RETENTION <= timestamp]
        for event_id in expired:
            self.seen.remove(event_id)
