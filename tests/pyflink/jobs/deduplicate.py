"""Emits each (key, event id) once: the ids a key has seen are kept in a MapState with the
processing time they were first seen, and a processing-time timer forgets each an hour later.
``deduplicate_demo`` runs the function over a collection of ``(user, event id)`` tuples.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types
from statecore.pyflink.common import Types

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext, TimeDomain
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext, TimeDomain

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
        return []  # nothing to emit: PyFlink iterates what on_timer returns, None fails


def deduplicate_demo(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    pair = Types.TUPLE([Types.STRING(), Types.STRING()])
    events = env.from_collection(
        [("u1", "e1"), ("u1", "e2"), ("u1", "e1"), ("u2", "e1"), ("u2", "e1")], type_info=pair
    )
    events.key_by(lambda event: event[0], key_type=Types.STRING()).process(
        Deduplicate(), output_type=pair
    ).print()

    return env.execute("deduplicate")
