"""The Broadcast State Pattern as Flink's documentation shows it: items of a color and a shape,
keyed by color, meet a broadcast stream of rules ("a rectangle followed by a triangle"); a
``KeyedBroadcastProcessFunction`` keeps the rules in broadcast state (a ``MapStateDescriptor``
from rule name to rule, written in ``process_broadcast_element``) and, per color, the items
that start a rule in a keyed ``MapState``; an item that finishes a rule emits one match per
stored item. Items are ``(color, shape)``, rules ``(name, first shape, second shape)``.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

# from pyflink.common.typeinfo import Types
from statecore.pyflink.common.typeinfo import Types

# from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from statecore.pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

# from pyflink.datastream.functions import KeyedBroadcastProcessFunction, RuntimeContext
from statecore.pyflink.datastream.functions import KeyedBroadcastProcessFunction, RuntimeContext

# from pyflink.datastream.state import MapStateDescriptor
from statecore.pyflink.datastream.state import MapStateDescriptor

RULE_STATE_DESCRIPTOR = MapStateDescriptor(
    "RulesBroadcastState",
    Types.STRING(),
    Types.TUPLE([Types.STRING(), Types.STRING(), Types.STRING()]),
)

ITEMS = [
    ("red", "rectangle"),
    ("blue", "rectangle"),
    ("green", "circle"),
    ("red", "triangle"),
    ("blue", "rectangle"),
    ("green", "triangle"),
    ("blue", "triangle"),
    ("red", "triangle"),
]

RULES = [
    ("rectangle-then-triangle", "rectangle", "triangle"),
    ("circle-then-triangle", "circle", "triangle"),
]


class PatternMatcher(KeyedBroadcastProcessFunction):
    def __init__(self):
        self.items = None

    def open(self, runtime_context: RuntimeContext):
        self.items = runtime_context.get_map_state(
            MapStateDescriptor("items", Types.STRING(), Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        shape = value[1]
        for rule_name, rule in ctx.get_broadcast_state(RULE_STATE_DESCRIPTOR).items():
            stored = self.items.get(rule_name)
            if stored is None:
                stored = []
            if shape == rule[2] and len(stored) > 0:
                for item in stored:
                    yield "MATCH: " + str(item) + " - " + str(value) + " (" + rule_name + ")"
                stored = []
            # there is no else{} to cover if rule.first == rule.second
            if shape == rule[1]:
                stored.append(value)
            if len(stored) == 0:
                self.items.remove(rule_name)
            else:
                self.items.put(rule_name, stored)

    def process_broadcast_element(self, value, ctx: KeyedBroadcastProcessFunction.Context):
        ctx.get_broadcast_state(RULE_STATE_DESCRIPTOR).put(value[0], value)


def broadcast_rules(mode=RuntimeExecutionMode.BATCH):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(mode)
    env.set_parallelism(1)

    item_stream = env.from_collection(
        ITEMS, type_info=Types.TUPLE([Types.STRING(), Types.STRING()])
    )
    rule_stream = env.from_collection(
        RULES, type_info=Types.TUPLE([Types.STRING(), Types.STRING(), Types.STRING()])
    )

    # key the items by color
    color_partitioned_stream = item_stream.key_by(lambda item: item[0], key_type=Types.STRING())

    # broadcast the rules and create the broadcast state
    rule_broadcast_stream = rule_stream.broadcast(RULE_STATE_DESCRIPTOR)

    output = color_partitioned_stream.connect(rule_broadcast_stream).process(
        PatternMatcher(), output_type=Types.STRING()
    )

    output.print()

    return env.execute("broadcast_rules")
