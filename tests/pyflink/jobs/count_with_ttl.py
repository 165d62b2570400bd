"""Counts each key's elements; a count not written for 10 seconds expires (state TTL).

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Time, Types
from statecore.pyflink.common import Time, Types

# from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream import KeyedProcessFunction, RuntimeContext

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
