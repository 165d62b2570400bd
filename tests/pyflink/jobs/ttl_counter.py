"""A counter per word with a state time-to-live, as Flink's documentation ("Working with State",
"State Time-To-Live", Python tab) configures it: a value state whose descriptor
``enable_time_to_live(ttl_config)``; each element emits a ``Row(word=..., count=...)`` typed
``Types.ROW_NAMED`` (printed as Flink prints a row: ``+I[word,count]``).

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Row, Time, Types, WatermarkStrategy
from statecore.pyflink.common import Row, Time, Types, WatermarkStrategy

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext

# from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor
from statecore.pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor


class CountWithTtl(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        ttl_config = (
            StateTtlConfig.new_builder(Time.hours(1))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build()
        )

        state_descriptor = ValueStateDescriptor("count", Types.LONG())
        state_descriptor.enable_time_to_live(ttl_config)
        self.count = runtime_context.get_state(state_descriptor)

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield Row(word=ctx.get_current_key(), count=count)


def ttl_counter(input_path=None, mode=RuntimeExecutionMode.STREAMING, sink=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    if input_path is not None:
        ds = env.from_source(
            FileSource.for_record_stream_format(
                StreamFormat.text_line_format(), input_path
            ).build(),
            WatermarkStrategy.for_monotonous_timestamps(),
            "words",
        )
    else:
        ds = env.from_collection(
            ["flink", "spark", "flink", "state", "flink"], type_info=Types.STRING()
        )

    counts = ds.key_by(lambda word: word, key_type=Types.STRING()).process(
        CountWithTtl(),
        output_type=Types.ROW_NAMED(["word", "count"], [Types.STRING(), Types.LONG()]),
    )

    if sink is not None:
        counts.sink_to(sink)
    else:
        counts.print()

    return env.execute("ttl_counter")
