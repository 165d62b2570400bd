"""A tumbling count window with ``reduce``: each key's values summed per 2 elements, as
PyFlink's ``count_window`` docs write it.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types
from statecore.pyflink.common import Types

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment


def count_window(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    data_stream = env.from_collection(
        [("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5), ("a", 6), ("b", 7)],
        type_info=Types.TUPLE([Types.STRING(), Types.INT()]),
    )

    ds = (
        data_stream.key_by(lambda x: x[0], key_type=Types.STRING())
        .count_window(2)
        .reduce(lambda v1, v2: (v1[0], v1[1] + v2[1]))
    )

    ds.print()

    return env.execute("count_window")
