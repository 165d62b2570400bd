"""Side outputs as PyFlink's documentation writes them: a ``ProcessFunction`` yields each value to
the main output and ``yield output_tag, value`` to a side output; ``get_side_output(output_tag)``
gives the side output's stream, printed beside the main one. And a keyed running total over a
file source whose large orders also go to a side output, mapped and printed with its own sink
identifier.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types, WatermarkStrategy
from statecore.pyflink.common import Types, WatermarkStrategy

# from pyflink.datastream import OutputTag, RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import OutputTag, RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat

# from pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction
from statecore.pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction

# from pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.state import ValueStateDescriptor

output_tag = OutputTag("side-output", Types.STRING())


class MyProcessFunction(ProcessFunction):
    def process_element(self, value: int, ctx: ProcessFunction.Context):
        # emit data to regular output
        yield value

        # emit data to side output
        yield output_tag, "sideout-" + str(value)


def side_output_demo(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    input = env.from_collection([1, 2, 3, 4, 5], type_info=Types.INT())

    main_data_stream = input.process(MyProcessFunction(), Types.INT())

    side_output_stream = main_data_stream.get_side_output(output_tag)

    main_data_stream.print()
    side_output_stream.print()

    return env.execute("side_output")


large_orders = OutputTag("large-orders", Types.TUPLE([Types.STRING(), Types.INT()]))


class RunningTotal(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.INT()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        if value[1] >= 100:
            yield large_orders, (ctx.get_current_key(), value[1])
        yield ctx.get_current_key(), total


def large_orders_demo(input_path, mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    ds = env.from_source(
        source=FileSource.for_record_stream_format(StreamFormat.text_line_format(), input_path)
        .process_static_file_set()
        .build(),
        watermark_strategy=WatermarkStrategy.no_watermarks(),
        source_name="orders",
    )
    orders = ds.map(
        lambda line: (line.split(",")[0], int(line.split(",")[1])),
        output_type=Types.TUPLE([Types.STRING(), Types.INT()]),
    )
    totals = orders.key_by(lambda order: order[0]).process(
        RunningTotal(), output_type=Types.TUPLE([Types.STRING(), Types.INT()])
    )

    totals.print()
    totals.get_side_output(large_orders).map(
        lambda order: "large order of " + order[0] + ": " + str(order[1]), Types.STRING()
    ).print("large")

    return env.execute("large_orders")
