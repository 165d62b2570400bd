"""PyFlink's ``state_access`` example: a running sum per name in a value state, each element
emitting ``(name, sum so far)``. With ``input_path`` the elements are ``name,amount`` lines
of a file source.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import WatermarkStrategy
from statecore.pyflink.common import WatermarkStrategy

# from pyflink.common.typeinfo import Types
from statecore.pyflink.common.typeinfo import Types

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
        current += value[1]
        self.state.update(current)

        yield value[0], current


def state_access_demo(input_path=None, mode=RuntimeExecutionMode.STREAMING, state_backend=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)
    if state_backend is not None:
        env.set_state_backend(state_backend)

    if input_path is not None:
        ds = env.from_source(
            source=FileSource.for_record_stream_format(
                StreamFormat.text_line_format(), input_path
            ).build(),
            watermark_strategy=WatermarkStrategy.no_watermarks(),
            source_name="file_source",
        ).map(lambda line: (line.split(",")[0], float(line.split(",")[1])))
    else:
        ds = env.from_collection(
            collection=[
                ("Alice", 110.1),
                ("Bob", 30.2),
                ("Alice", 20.0),
                ("Bob", 53.1),
                ("Alice", 13.1),
                ("Bob", 3.1),
                ("Bob", 16.1),
                ("Alice", 20.1),
            ]
        )

    # apply the process function onto a keyed stream
    ds.key_by(lambda value: value[0]).process(Sum()).print()

    # submit for execution
    return env.execute("state_access")
