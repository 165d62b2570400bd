"""Counts each key's elements per session and emits (key, count) once the key has seen no
element for 5 seconds of event time (an event-time timer per element; an outdated timer is
ignored, as in Flink's ``CountWithTimeoutFunction`` example). An element behind the watermark
belongs to a session already closed: the function drops it itself.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common.typeinfo import Types
from statecore.pyflink.common.typeinfo import Types

# from pyflink.datastream import KeyedProcessFunction, RuntimeContext, TimeDomain
from statecore.pyflink.datastream import KeyedProcessFunction, RuntimeContext, TimeDomain

# from pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.state import ValueStateDescriptor

SESSION_GAP = 5000  # ms


class SessionTimeout(KeyedProcessFunction):
    def __init__(self):
        self.count = None
        self.last_seen = None

    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.last_seen = runtime_context.get_state(ValueStateDescriptor("last_seen", Types.LONG()))

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        if ctx.timestamp() <= ctx.timer_service().current_watermark():
            return  # late: its session has closed
        current = self.count.value()
        if current is None:
            current = 0
        self.count.update(current + 1)
        self.last_seen.update(ctx.timestamp())
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + SESSION_GAP)

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        if ctx.time_domain() != TimeDomain.EVENT_TIME:
            return
        last_seen = self.last_seen.value()
        if last_seen is not None and timestamp == last_seen + SESSION_GAP:
            yield ctx.get_current_key(), self.count.value()
            self.count.clear()
            self.last_seen.clear()
