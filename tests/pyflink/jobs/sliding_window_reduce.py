"""A sliding event-time window with ``reduce``, as PyFlink's window docs write a
``ReduceFunction``: the sum of each key's values per window of 5 ms, every 2 ms.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Time, Types, WatermarkStrategy
from statecore.pyflink.common import Time, Types, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.window import SlidingEventTimeWindows
from statecore.pyflink.datastream.window import SlidingEventTimeWindows


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


def sliding_window_reduce(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 5), ("hi", 8), ("hi", 9), ("hi", 15)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT()]),
    )

    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )

    ds = (
        data_stream.assign_timestamps_and_watermarks(watermark_strategy)
        .key_by(lambda x: x[0], key_type=Types.STRING())
        .window(SlidingEventTimeWindows.of(Time.milliseconds(5), Time.milliseconds(2)))
        .reduce(lambda v1, v2: (v1[0], v1[1] + v2[1]))
    )

    ds.print()

    return env.execute("sliding_window_reduce")
