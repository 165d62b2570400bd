"""Clicks enriched with the user's latest profile: two keyed streams connected into a
``KeyedCoProcessFunction``. Clicks are ``(time, user, page)``, profile updates
``(time, user, tier)``; each click is emitted, when the watermark passes its time, with the tier
of the user's latest profile at or before that time (``unknown`` before any).

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common import WatermarkStrategy
from statecore.pyflink.common import WatermarkStrategy

# from pyflink.common.typeinfo import Types
from statecore.pyflink.common.typeinfo import Types

# from pyflink.common.watermark_strategy import TimestampAssigner
from statecore.pyflink.common.watermark_strategy import TimestampAssigner

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import KeyedCoProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedCoProcessFunction, RuntimeContext

# from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor
from statecore.pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor

CLICKS = [
    (1000, "ann", "/"),
    (2000, "bob", "/"),
    (3000, "ann", "/cart"),
    (4000, "bob", "/help"),
    (6000, "ann", "/pay"),
]

PROFILES = [
    (500, "bob", "silver"),
    (2500, "ann", "gold"),
    (5000, "ann", "platinum"),
]


class EnrichClicks(KeyedCoProcessFunction):
    def __init__(self):
        self.clicks = None
        self.profiles = None

    def open(self, runtime_context: RuntimeContext):
        self.clicks = runtime_context.get_list_state(
            ListStateDescriptor("clicks", Types.PICKLED_BYTE_ARRAY())
        )
        self.profiles = runtime_context.get_map_state(
            MapStateDescriptor("profiles", Types.LONG(), Types.STRING())
        )

    def process_element1(self, value, ctx: "KeyedCoProcessFunction.Context"):
        # wait for the watermark: every profile update up to the click's time has arrived then
        self.clicks.add(value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def process_element2(self, value, ctx: "KeyedCoProcessFunction.Context"):
        self.profiles.put(ctx.timestamp(), value[2])

    def on_timer(self, timestamp: int, ctx: "KeyedCoProcessFunction.OnTimerContext"):
        times = [t for t, _ in self.profiles.items() if t <= timestamp]
        tier = self.profiles.get(max(times)) if times else "unknown"
        waiting = []
        for click in self.clicks.get():
            if click[0] == timestamp:
                yield ctx.get_current_key(), click[2], tier
            else:
                waiting.append(click)
        self.clicks.update(waiting)


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp: int) -> int:
        return value[0]


def enrich_clicks_demo(mode=RuntimeExecutionMode.STREAMING):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    watermarks = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(FirstField())
    clicks = env.from_collection(CLICKS).assign_timestamps_and_watermarks(watermarks)
    profiles = env.from_collection(PROFILES).assign_timestamps_and_watermarks(watermarks)

    clicks.key_by(lambda click: click[1]).connect(
        profiles.key_by(lambda profile: profile[1])
    ).process(EnrichClicks()).print()

    return env.execute("enrich_clicks")
