"""Counts each key's elements per session and emits (key, count) once the key has seen no
element for 5 seconds of event time (an event-time timer per element; an outdated timer is
ignored, as in Flink's ``CountWithTimeoutFunction`` example). An element behind the watermark
belongs to a session already closed: the function drops it itself. ``session_timeout_demo``
runs it over a collection of ``(key, time)`` tuples, their times in order and 1 s of
out-of-orderness allowed.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Duration, WatermarkStrategy
from statecore.pyflink.common import Duration, WatermarkStrategy

# from pyflink.common.typeinfo import Types
from statecore.pyflink.common.typeinfo import Types

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext, TimeDomain
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext, TimeDomain

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


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[1]


def session_timeout_demo(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    ds = env.from_collection([("a", 1000), ("b", 2000), ("a", 3000), ("b", 4000), ("a", 5500)])
    ds = ds.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(
            Duration.of_seconds(1)
        ).with_timestamp_assigner(SecondField())
    )
    ds.key_by(lambda value: value[0], key_type=Types.STRING()).process(SessionTimeout()).print()

    return env.execute("session_timeout")
