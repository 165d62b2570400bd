"""Deduplication with a ``MapState`` (the pattern of Flink's documentation for MapState): per
user, the event ids seen so far; an event is emitted the first time its id is seen, as a
``Types.TUPLE`` (printed as Flink prints a tuple: ``(user,event)``). Elements are
``user,event`` strings; with ``input_path``, lines of files.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types, WatermarkStrategy
from statecore.pyflink.common import Types, WatermarkStrategy

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext

# from pyflink.datastream.state import MapStateDescriptor
from statecore.pyflink.datastream.state import MapStateDescriptor


class Deduplicate(KeyedProcessFunction):
    def __init__(self):
        self.seen = None

    def open(self, runtime_context: RuntimeContext):
        self.seen = runtime_context.get_map_state(
            MapStateDescriptor("seen", Types.STRING(), Types.BOOLEAN())
        )

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        user, event = value
        if not self.seen.contains(event):
            self.seen.put(event, True)
            yield user, event


def deduplicate(input_path=None, mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    if input_path is not None:
        lines = env.from_source(
            FileSource.for_record_stream_format(
                StreamFormat.text_line_format(), input_path
            ).build(),
            WatermarkStrategy.no_watermarks(),
            "events",
        )
    else:
        lines = env.from_collection(["u1,e1", "u1,e2", "u1,e1", "u2,e1", "u2,e1", "u1,e3"])

    lines.map(
        lambda line: tuple(line.split(",")),
        output_type=Types.TUPLE([Types.STRING(), Types.STRING()]),
    ).filter(lambda event: event[1] != "").key_by(
        lambda event: event[0], key_type=Types.STRING()
    ).process(Deduplicate(), output_type=Types.TUPLE([Types.STRING(), Types.STRING()])).print()

    return env.execute("deduplicate")
