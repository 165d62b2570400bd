"""Event-time session windows with a dynamic gap: each element says how long its session stays
open (a ``SessionWindowTimeGapExtractor``), and a ``ProcessWindowFunction`` gives each session
of each user with its bounds and element count.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

from collections.abc import Iterable

# from pyflink.common import Types, WatermarkStrategy
from statecore.pyflink.common import Types, WatermarkStrategy

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import ProcessWindowFunction
from statecore.pyflink.datastream.functions import ProcessWindowFunction

# from pyflink.datastream.window import EventTimeSessionWindows, SessionWindowTimeGapExtractor
from statecore.pyflink.datastream.window import (
    EventTimeSessionWindows,
    SessionWindowTimeGapExtractor,
)


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


class GapOfTheElement(SessionWindowTimeGapExtractor):
    def extract(self, element: tuple) -> int:
        return element[2]


class SessionBounds(ProcessWindowFunction):
    def process(
        self,
        key: str,
        context: ProcessWindowFunction.Context,
        elements: Iterable[tuple],
    ) -> Iterable[tuple]:
        return [(key, context.window().start, context.window().end, len([e for e in elements]))]


def session_dynamic_gap(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [
            ("ann", 1, 3),
            ("bob", 2, 20),
            ("ann", 3, 5),
            ("ann", 10, 2),
            ("ann", 11, 10),
            ("bob", 30, 1),
            ("ann", 40, 1),
        ],
        type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT()]),
    )

    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )

    ds = (
        data_stream.assign_timestamps_and_watermarks(watermark_strategy)
        .key_by(lambda x: x[0], key_type=Types.STRING())
        .window(EventTimeSessionWindows.with_dynamic_gap(GapOfTheElement()))
        .process(
            SessionBounds(),
            Types.TUPLE([Types.STRING(), Types.INT(), Types.INT(), Types.INT()]),
        )
    )

    ds.print()

    return env.execute("session_dynamic_gap")
