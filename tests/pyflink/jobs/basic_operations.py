"""PyFlink's ``basic_operations`` example: a collection of ``ROW_NAMED`` rows through ``map``,
``filter`` and ``key_by`` + ``reduce``, each pipeline printed by its own ``execute``; and a
``flat_map`` of the JSON's address fields.

PyFlink code: only the imports differ (the comment above each names PyFlink's).
"""

import json

# from pyflink.common import Types
from statecore.pyflink.common import Types

# from pyflink.datastream import StreamExecutionEnvironment
from statecore.pyflink.datastream import StreamExecutionEnvironment


def show(ds, env):
    ds.print()
    env.execute()


def basic_operations():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)

    # define the source
    ds = env.from_collection(
        collection=[
            (1, '{"name": "Flink", "tel": 123, "addr": {"country": "Germany", "city": "Berlin"}}'),
            (2, '{"name": "hello", "tel": 135, "addr": {"country": "China", "city": "Shanghai"}}'),
            (3, '{"name": "world", "tel": 124, "addr": {"country": "USA", "city": "NewYork"}}'),
            (4, '{"name": "PyFlink", "tel": 32, "addr": {"country": "China", "city": "Hangzhou"}}'),
        ],
        type_info=Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()]),
    )

    # map
    def update_tel(data):
        # parse the json
        json_data = json.loads(data.info)
        json_data["tel"] += 1
        return data.id, json.dumps(json_data)

    show(ds.map(update_tel), env)

    # filter
    show(ds.filter(lambda data: data.id == 1).map(update_tel), env)

    # flat_map
    def cities(data):
        addr = json.loads(data.info)["addr"]
        yield addr["country"]
        yield addr["city"]

    show(ds.flat_map(cities, output_type=Types.STRING()).filter(lambda s: s.startswith("C")), env)

    # key by
    show(
        ds.map(
            lambda data: (json.loads(data.info)["addr"]["country"], json.loads(data.info)["tel"])
        )
        .key_by(lambda data: data[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1])),
        env,
    )
