"""PyFlink's ``word_count`` example: words of text lines counted with ``flat_map``, ``map`` to
``(word, 1)`` tuples, ``key_by`` and ``reduce``; printed or written by a file sink. ``mode``
is the example's ``BATCH`` unless the caller runs it as a stream.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Encoder, Types, WatermarkStrategy
from statecore.pyflink.common import Encoder, Types, WatermarkStrategy

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.connectors import OutputFileConfig, RollingPolicy
from statecore.pyflink.datastream.connectors import OutputFileConfig, RollingPolicy

# from pyflink.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.file_system import FileSink, FileSource, StreamFormat

word_count_data = [
    "To be, or not to be,--that is the question:--",
    "Whether 'tis nobler in the mind to suffer",
]


def word_count(input_path, output_path, mode=RuntimeExecutionMode.BATCH):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    # write all the data to one file
    env.set_parallelism(1)

    # define the source
    if input_path is not None:
        ds = env.from_source(
            source=FileSource.for_record_stream_format(StreamFormat.text_line_format(), input_path)
            .process_static_file_set()
            .build(),
            watermark_strategy=WatermarkStrategy.for_monotonous_timestamps(),
            source_name="file_source",
        )
    else:
        ds = env.from_collection(word_count_data)

    def split(line):
        yield from line.split()

    # compute word count
    ds = (
        ds.flat_map(split)
        .map(lambda i: (i, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda i: i[0])
        .reduce(lambda i, j: (i[0], i[1] + j[1]))
    )

    # define the sink
    if output_path is not None:
        ds.sink_to(
            sink=FileSink.for_row_format(
                base_path=output_path, encoder=Encoder.simple_string_encoder()
            )
            .with_output_file_config(
                OutputFileConfig.builder()
                .with_part_prefix("prefix")
                .with_part_suffix(".ext")
                .build()
            )
            .with_rolling_policy(RollingPolicy.default_rolling_policy())
            .build()
        )
    else:
        ds.print()

    # submit for execution
    return env.execute("word_count")
