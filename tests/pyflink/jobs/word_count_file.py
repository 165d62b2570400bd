"""PyFlink's word count read from one text file with ``FileSource``, run in STREAMING (PyFlink's
default mode, no ``set_runtime_mode``): words of the lines counted with ``flat_map``, ``map``
to ``(word, 1)`` tuples, ``key_by`` and ``reduce``, printed. ``input_path`` may be a file or a
folder.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types, WatermarkStrategy
from statecore.pyflink.common import Types, WatermarkStrategy

# from pyflink.datastream import StreamExecutionEnvironment
from statecore.pyflink.datastream import StreamExecutionEnvironment

# from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat


def word_count(input_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)

    ds = env.from_source(
        source=FileSource.for_record_stream_format(StreamFormat.text_line_format(), input_path)
        .process_static_file_set()
        .build(),
        watermark_strategy=WatermarkStrategy.for_monotonous_timestamps(),
        source_name="file_source",
    )

    def split(line):
        yield from line.split()

    # compute word count
    ds = (
        ds.flat_map(split)
        .map(lambda i: (i, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda i: i[0])
        .reduce(lambda i, j: (i[0], i[1] + j[1]))
    )

    ds.print()

    # submit for execution
    return env.execute("word_count_file")
