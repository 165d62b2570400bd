"""PyFlink's "Working with State" example (``CountWindowAverage``): a ``FlatMapFunction`` on a
keyed stream declares a ``ValueState`` in ``open()`` and emits the average of every two
elements of a key. With ``input_path`` the elements are ``key,value`` lines of a file source
(a file or a folder); ``mode`` is STREAMING (PyFlink's default) unless the caller says BATCH.

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

# from pyflink.datastream.functions import FlatMapFunction, RuntimeContext
from statecore.pyflink.datastream.functions import FlatMapFunction, RuntimeContext

# from pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.state import ValueStateDescriptor


class CountWindowAverage(FlatMapFunction):
    def __init__(self):
        self.sum = None

    def open(self, runtime_context: RuntimeContext):
        descriptor = ValueStateDescriptor(
            "average",  # the state name
            Types.PICKLED_BYTE_ARRAY(),  # type information
        )
        self.sum = runtime_context.get_state(descriptor)

    def flat_map(self, value):
        # access the state value
        current_sum = self.sum.value()
        if current_sum is None:
            current_sum = (0, 0)

        # update the count
        current_sum = (current_sum[0] + 1, current_sum[1] + value[1])

        # update the state
        self.sum.update(current_sum)

        # if the count reaches 2, emit the average and clear the state
        if current_sum[0] >= 2:
            self.sum.clear()
            yield value[0], int(current_sum[1] / current_sum[0])


def count_window_average(input_path=None, mode=RuntimeExecutionMode.STREAMING, backend=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)
    if backend is not None:
        env.set_state_backend(backend)

    if input_path is None:
        ds = env.from_collection([(1, 3), (1, 5), (1, 7), (1, 4), (1, 2)])
    else:
        ds = env.from_source(
            source=FileSource.for_record_stream_format(
                StreamFormat.text_line_format(), input_path
            ).build(),
            watermark_strategy=WatermarkStrategy.no_watermarks(),
            source_name="file_source",
        ).map(lambda line: tuple(int(field) for field in line.split(",")))

    ds.key_by(lambda row: row[0]).flat_map(CountWindowAverage()).print()

    # the printed output will be (1,4) and (1,5)
    return env.execute("count_window_average")
