"""A non-keyed ``ProcessFunction`` in PyFlink's documented style (``DataStream.process`` on a
stream without ``key_by``): each order with the timestamp its watermark strategy assigned
(``ctx.timestamp()``), whether the watermark is behind it
(``ctx.timer_service().current_watermark()``), and large orders only, as a ``filter`` after
it keeps them. Its ``open`` reads the subtask from the runtime context.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Duration, WatermarkStrategy
from statecore.pyflink.common import Duration, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import ProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import ProcessFunction, RuntimeContext


class OrderTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[2]


class Stamp(ProcessFunction):
    def __init__(self):
        self.subtask = None

    def open(self, runtime_context: RuntimeContext):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx: "ProcessFunction.Context"):
        watermark_behind = ctx.timer_service().current_watermark() < ctx.timestamp()
        yield value[0], value[1], ctx.timestamp(), watermark_behind, self.subtask

    def close(self):
        self.subtask = None


ORDERS = [("o1", 20, 1000), ("o2", 250, 2000), ("o3", 75, 3000), ("o4", 120, 3500)]


def process_function_demo(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    ds = env.from_collection(ORDERS)
    ds = ds.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(
            Duration.of_seconds(1)
        ).with_timestamp_assigner(OrderTimestampAssigner())
    )
    ds.process(Stamp()).filter(lambda order: order[1] >= 100).print()

    return env.execute("process_function")
