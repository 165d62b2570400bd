"""A ``window_all`` over a stream without a key: tumbling event-time windows of 5 ms over every
element, with a ``ProcessAllWindowFunction`` that lists the window's elements and sums their
values (Flink runs a non-keyed window at parallelism 1).

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

from collections.abc import Iterable

# from pyflink.common import Time, Types, WatermarkStrategy
from statecore.pyflink.common import Time, Types, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import ProcessAllWindowFunction
from statecore.pyflink.datastream.functions import ProcessAllWindowFunction

# from pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows
from statecore.pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[2])


class SumAllWindowFunction(ProcessAllWindowFunction[tuple, str, TimeWindow]):
    def process(
        self, context: ProcessAllWindowFunction.Context, elements: Iterable[tuple]
    ) -> Iterable[str]:
        window = context.window()
        elements = list(elements)
        names = " ".join(e[0] for e in elements)
        total = sum(e[1] for e in elements)
        yield "[" + str(window.start) + ", " + str(window.end) + "): " + names + " = " + str(total)


def window_all_tumbling(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [("a", 1, 1), ("b", 2, 2), ("c", 3, 4), ("a", 4, 6), ("b", 5, 8), ("c", 6, 12)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]),
    )

    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )

    ds = (
        data_stream.assign_timestamps_and_watermarks(watermark_strategy)
        .window_all(TumblingEventTimeWindows.of(Time.milliseconds(5)))
        .process(SumAllWindowFunction(), Types.STRING())
    )

    ds.print()

    return env.execute("window_all_tumbling")
