"""A click count per user read from Kafka, as Flink's Kafka connector documentation builds the
source (``KafkaSource.builder()``, ``SimpleStringSchema``), bounded at the offsets of the start
(``set_bounded``) so that the job ends. The record's Kafka timestamp is its event time
(``for_monotonous_timestamps`` without an assigner, as in Flink); each click emits
``(user, clicks so far, timestamp)``.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import Types, WatermarkStrategy
from statecore.pyflink.common import Types, WatermarkStrategy

# from pyflink.common.serialization import SimpleStringSchema
from statecore.pyflink.common.serialization import SimpleStringSchema

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from statecore.pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource

# from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext

# from pyflink.datastream.state import ValueStateDescriptor
from statecore.pyflink.datastream.state import ValueStateDescriptor


class CountClicks(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.clicks = runtime_context.get_state(ValueStateDescriptor("clicks", Types.LONG()))

    def process_element(self, value, ctx: "KeyedProcessFunction.Context"):
        clicks = (self.clicks.value() or 0) + 1
        self.clicks.update(clicks)
        yield ctx.get_current_key(), clicks, ctx.timestamp()


def kafka_clicks(brokers, topic, mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(brokers)
        .set_topics(topic)
        .set_group_id("clicks")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )

    env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "Kafka Source").key_by(
        lambda user: user, key_type=Types.STRING()
    ).process(
        CountClicks(), output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()])
    ).print()

    return env.execute("kafka_clicks")
