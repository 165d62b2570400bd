"""Counts each key's elements; a count not written for 10 seconds expires (state TTL).
``count_with_ttl_demo`` runs the function over a collection of words.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Time, Types
from statecore.pyflink.common import Time, Types

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext

# from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor
from statecore.pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor


class CountWithTtl(KeyedProcessFunction):
    def __init__(self):
        self.count = None

    def open(self, runtime_context: RuntimeContext):
        ttl_config = (
            StateTtlConfig.new_builder(Time.seconds(10))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .cleanup_full_snapshot()
            .build()
        )
        state_descriptor = ValueStateDescriptor("count", Types.LONG())
        state_descriptor.enable_time_to_live(ttl_config)
        self.count = runtime_context.get_state(state_descriptor)

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        current = self.count.value()
        if current is None:
            current = 0
        current += 1
        self.count.update(current)
        yield ctx.get_current_key(), current


def count_with_ttl_demo(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    words = env.from_collection(["flink", "spark", "flink", "flink"], type_info=Types.STRING())
    words.key_by(lambda word: word, key_type=Types.STRING()).process(CountWithTtl()).print()

    return env.execute("count_with_ttl")
