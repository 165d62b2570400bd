"""A window's ``AggregateFunction`` beside a rich ``ProcessWindowFunction``: the window
function's ``open()`` reads the runtime context (its subtask) before the first window fires,
and labels each tumbling window's scaled average with it. (PyFlink opens the window function,
not the aggregate function given with it: Java Flink refuses a rich one there.)

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

from collections.abc import Iterable

# from pyflink.common import Time, Types, WatermarkStrategy
from statecore.pyflink.common import Time, Types, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import AggregateFunction, ProcessWindowFunction, RuntimeContext
from statecore.pyflink.datastream.functions import (
    AggregateFunction,
    ProcessWindowFunction,
    RuntimeContext,
)

# from pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows
from statecore.pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


class ScaledAverage(AggregateFunction):
    def __init__(self, scale=10):
        self.scale = scale

    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value[2] * self.scale, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] // accumulator[1]

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class LabelWindow(ProcessWindowFunction[int, tuple, str, TimeWindow]):
    def __init__(self):
        self.subtask = None

    def open(self, runtime_context: RuntimeContext):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process(
        self,
        key: str,
        context: ProcessWindowFunction.Context[TimeWindow],
        averages: Iterable[int],
    ) -> Iterable[tuple]:
        average = next(iter(averages))
        return [(key, context.window().start, average, self.subtask)]


def rich_window_aggregate(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [("hi", 1, 2), ("hi", 2, 4), ("hi", 6, 5), ("hi", 7, 8), ("hi", 8, 2)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]),
    )

    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )

    ds = (
        data_stream.assign_timestamps_and_watermarks(watermark_strategy)
        .key_by(lambda x: x[0], key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(5)))
        .aggregate(
            ScaledAverage(),
            LabelWindow(),
            accumulator_type=Types.TUPLE([Types.LONG(), Types.LONG()]),
            output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG(), Types.INT()]),
        )
    )

    ds.print()

    return env.execute("rich_window_aggregate")
