"""An event-time session window with ``aggregate``, with the ``AverageAggregate`` of PyFlink's
window docs: the average of each key's values per session (a gap of 5 ms closes one).

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Time, Types, WatermarkStrategy
from statecore.pyflink.common import Time, Types, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import AggregateFunction
from statecore.pyflink.datastream.functions import AggregateFunction

# from pyflink.datastream.window import EventTimeSessionWindows
from statecore.pyflink.datastream.window import EventTimeSessionWindows


class AverageAggregate(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add(self, value: tuple[str, int], accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator[0] + value[1], accumulator[1] + 1

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return a[0] + b[0], a[1] + b[1]


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


def session_window_aggregate(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 8), ("hi", 9), ("hi", 15)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT()]),
    )

    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )

    ds = (
        data_stream.assign_timestamps_and_watermarks(watermark_strategy)
        .key_by(lambda x: x[0], key_type=Types.STRING())
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(5)))
        .aggregate(
            AverageAggregate(),
            accumulator_type=Types.TUPLE([Types.LONG(), Types.LONG()]),
            output_type=Types.DOUBLE(),
        )
    )

    ds.print()

    return env.execute("session_window_aggregate")
