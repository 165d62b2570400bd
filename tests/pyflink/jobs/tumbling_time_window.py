"""PyFlink's ``tumbling_time_window`` example (``pyflink/examples/datastream/windowing``): a
``ProcessWindowFunction`` counting each key's elements per tumbling event-time window of 5 ms.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

from collections.abc import Iterable

# from pyflink.common import Time, Types, WatermarkStrategy
from statecore.pyflink.common import Time, Types, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import ProcessWindowFunction
from statecore.pyflink.datastream.functions import ProcessWindowFunction

# from pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows
from statecore.pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


class CountWindowProcessFunction(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(
        self,
        key: str,
        context: ProcessWindowFunction.Context[TimeWindow],
        elements: Iterable[tuple],
    ) -> Iterable[tuple]:
        return [(key, context.window().start, context.window().end, len([e for e in elements]))]


def tumbling_time_window(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [("hi", 1), ("hi", 2), ("hi", 3), ("hi", 4), ("hi", 5), ("hi", 8), ("hi", 9), ("hi", 15)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT()]),
    )

    # define the watermark strategy
    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )

    ds = (
        data_stream.assign_timestamps_and_watermarks(watermark_strategy)
        .key_by(lambda x: x[0], key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(5)))
        .process(
            CountWindowProcessFunction(),
            Types.TUPLE([Types.STRING(), Types.INT(), Types.INT(), Types.INT()]),
        )
    )

    # print the results
    ds.print()

    # submit for execution
    return env.execute("tumbling_time_window")
