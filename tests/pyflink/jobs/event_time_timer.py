"""PyFlink's ``event_time_timer`` example: a sum per name, and an event-time timer 2 seconds
after each element that emits ``(name, sum)`` when it fires. Elements are
``(time, name, amount)``; with ``input_path``, ``time,name,amount`` lines.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Duration, WatermarkStrategy
from statecore.pyflink.common import Duration, WatermarkStrategy

# from pyflink.common.typeinfo import Types
from statecore.pyflink.common.typeinfo import Types

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext

# from pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.state import ValueStateDescriptor


class Sum(KeyedProcessFunction):
    def __init__(self):
        self.state = None

    def open(self, runtime_context: RuntimeContext):
        state_descriptor = ValueStateDescriptor("state", Types.PICKLED_BYTE_ARRAY())
        self.state = runtime_context.get_state(state_descriptor)

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        # retrieve the current count
        current = self.state.value()
        if current is None:
            current = 0

        # update the state's count
        current += value[2]
        self.state.update(current)

        # register an event time timer 2 seconds later
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 2000)

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        yield ctx.get_current_key(), self.state.value()


class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp: int) -> int:
        return int(value[0])


def event_timer_timer_demo(input_path=None, mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    if input_path is not None:
        ds = env.from_source(
            FileSource.for_record_stream_format(
                StreamFormat.text_line_format(), input_path
            ).build(),
            WatermarkStrategy.no_watermarks(),
            "lines",
        ).map(lambda line: (int(line.split(",")[0]), line.split(",")[1], float(line.split(",")[2])))
    else:
        ds = env.from_collection(
            collection=[
                (1000, "Alice", 110.1),
                (4000, "Bob", 30.2),
                (3000, "Alice", 20.0),
                (2000, "Bob", 53.1),
                (5000, "Alice", 13.1),
                (3000, "Bob", 3.1),
                (7000, "Bob", 16.1),
                (10000, "Alice", 20.1),
            ]
        )

    ds = ds.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(
            Duration.of_seconds(2)
        ).with_timestamp_assigner(MyTimestampAssigner())
    )

    # apply the process function onto a keyed stream
    ds.key_by(lambda value: value[1]).process(Sum()).print()

    # submit for execution
    return env.execute("event_time_timer")
