"""Flink's documented ``CountWithTimeoutFunction`` (docs, "Process Function", Python tab): a
count per key kept in a ``Row`` state, emitted once a minute of event time passes without an
element for the key (an outdated timer is ignored). Elements are ``Row``s of
``(time, key)``; with ``input_path``, ``time,key`` lines. The state is declared
``Types.ROW([...])``, so it is a typed struct in the checkpoint and SQL, and a ``Row`` again
when read back (``current[1] += 1`` mutates it), on the heap and in RocksDB.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Row, WatermarkStrategy
from statecore.pyflink.common import Row, WatermarkStrategy

# from pyflink.common.time import Duration
from statecore.pyflink.common.time import Duration

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


class CountWithTimeoutFunction(KeyedProcessFunction):
    def __init__(self):
        self.state = None

    def open(self, runtime_context: RuntimeContext):
        self.state = runtime_context.get_state(
            ValueStateDescriptor(
                "my_state", Types.ROW([Types.STRING(), Types.LONG(), Types.LONG()])
            )
        )

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        # retrieve the current count
        current = self.state.value()
        if current is None:
            current = Row(value.f1, 0, 0)

        # update the state's count
        current[1] += 1

        # set the state's timestamp to the record's assigned event time timestamp
        current[2] = ctx.timestamp()

        # write the state back
        self.state.update(current)

        # schedule the next timer 60 seconds from the current event time
        ctx.timer_service().register_event_time_timer(current[2] + 60000)

    def on_timer(self, timestamp: int, ctx: "KeyedProcessFunction.OnTimerContext"):
        # get the state for the key that scheduled the timer
        result = self.state.value()

        # check if this is an outdated timer or the latest timer
        if timestamp == result[2] + 60000:
            # emit the state on timeout
            yield result[0], result[1]


class MyTimestampAssigner(TimestampAssigner):
    def __init__(self):
        self.epoch = 0

    def extract_timestamp(self, value, record_timestamp) -> int:
        return value[0]


def count_with_timeout(input_path=None, mode=RuntimeExecutionMode.STREAMING, state_backend=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)
    if state_backend is not None:
        env.set_state_backend(state_backend)

    if input_path is not None:
        ds = env.from_source(
            FileSource.for_record_stream_format(
                StreamFormat.text_line_format(), input_path
            ).build(),
            WatermarkStrategy.no_watermarks(),
            "events",
        ).map(
            lambda line: Row(int(line.split(",")[0]), line.split(",")[1]),
            output_type=Types.ROW([Types.LONG(), Types.STRING()]),
        )
    else:
        ds = env.from_collection(
            [(1000, "hi"), (2000, "hello"), (3000, "hi"), (4000, "hello"), (5000, "hi")],
            type_info=Types.ROW([Types.LONG(), Types.STRING()]),
        )

    watermark_strategy = (
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))
        .with_timestamp_assigner(MyTimestampAssigner())
        .with_idleness(Duration.of_seconds(30))
    )

    ds.assign_timestamps_and_watermarks(watermark_strategy).key_by(
        lambda value: value.f1, key_type=Types.STRING()
    ).process(CountWithTimeoutFunction()).print()

    return env.execute("count_with_timeout")
