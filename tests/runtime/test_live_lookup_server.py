"""The live lookup server of a Python worker (:mod:`statecore.runtime.live`): a real HTTP server
over a real heap backend, read while the state changes, with its token, its errors and its
binding rules."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import HeapKeyedStateBackend
from statecore.descriptors import MapStateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.runtime import live
from statecore.runtime.functions import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.live import LiveRegistry, bind_host, encode_key
from statecore.runtime.task import KeyedOperatorTask
from statecore.types import TypeInfo

MAX_P = 128
TOKEN = "s3cret-token"


@pytest.fixture
def backend() -> Iterator[HeapKeyedStateBackend]:
    b = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 63), max_parallelism=MAX_P
    )
    yield b
    b.close()


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveRegistry]:
    monkeypatch.setenv("STATECORE_LIVE_HOST", "127.0.0.1")
    r = LiveRegistry()
    yield r
    r.clear()
    if r._server is not None:
        r._server.close()


def key_in_range(start: int, end: int) -> str:
    return next(
        k
        for k in (f"user{i}" for i in range(1000))
        if start <= assign_to_key_group(k, MAX_P) <= end
    )


def serve(registry: LiveRegistry, backend: HeapKeyedStateBackend, checkpoint_id: int) -> Any:
    """The backend (key groups 0-63) served as subtask 0 of job ``j``: the held state, the
    address, and the request body of a key of the range in state ``total``."""
    key = key_in_range(0, 63)
    held, address = registry.hold(
        job="j",
        operator="main",
        subtask=0,
        key_groups=KeyGroupRange(0, 63),
        token=TOKEN,
        backend=backend,
        checkpoint_id=checkpoint_id,
    )
    kg = assign_to_key_group(key, MAX_P)
    body = {"job": "j", "operator": "main", "state": "total", "key_group": kg, **encode_key(key)}
    return held, address, key, body


def ask(address: str, body: dict[str, Any], token: str | None = TOKEN) -> tuple[int, Any, Any]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn.request("POST", "/state", json.dumps(body), headers=headers)
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    if response.status == 200:
        return 200, pa.ipc.open_stream(payload).read_all(), response
    return response.status, json.loads(payload)["error"], response


def test_live_lookup_server_reads_the_state_as_it_is_now(
    backend: HeapKeyedStateBackend, registry: LiveRegistry
) -> None:
    total = backend.get_partitioned_state(ValueStateDescriptor("total", int))
    items = backend.get_partitioned_state(MapStateDescriptor("items", str, int))
    held, address, key, body = serve(registry, backend, checkpoint_id=3)
    backend.set_current_key(key)
    total.update(5)
    items.put("a", 1)
    status, rows, response = ask(address, body)
    assert status == 200 and rows.column("value").to_pylist() == [5]
    assert response.getheader("X-Statecore-Checkpoint") == "3"
    assert response.getheader("X-Statecore-Running") == "1"
    total.update(6)  # a later record: the next read sees it, no checkpoint needed
    registry.snapshotted(held, 4)
    status, rows, response = ask(address, body)
    assert rows.column("value").to_pylist() == [6]
    assert response.getheader("X-Statecore-Checkpoint") == "4"
    assert response.getheader("X-Statecore-Running") == "0"
    status, rows, _ = ask(address, {**body, "state": "items"})
    assert dict(zip(rows.column("user_key").to_pylist(), rows.column("value").to_pylist())) == {
        "a": 1
    }
    missing = {**body, **encode_key("nobody"), "key_group": assign_to_key_group("nobody", MAX_P)}
    if assign_to_key_group("nobody", MAX_P) <= 63:
        status, rows, _ = ask(address, missing)
        assert status == 200 and rows.num_rows == 0


def test_live_lookup_server_refuses_what_it_must(
    backend: HeapKeyedStateBackend, registry: LiveRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend.get_partitioned_state(ValueStateDescriptor("total", int))
    held, address, _, body = serve(registry, backend, checkpoint_id=1)
    assert ask(address, body, token="wrong")[0] == 401
    assert ask(address, body, token=None)[0] == 401
    assert ask(address, {**body, "job": "other"})[0] == 404
    outside = key_in_range(64, 127)
    status, error, _ = ask(
        address, {**body, "key_group": assign_to_key_group(outside, MAX_P), **encode_key(outside)}
    )
    assert status == 404 and "not held here" in error
    assert ask(address, {**body, "state": "nope"})[0] == 400
    assert ask(address, {**body, "key": [1, 2]})[0] == 400
    assert ask(address, {k: v for k, v in body.items() if k != "key_group"})[0] == 400
    # a task processing a batch holds the lock: a read waits, then answers 503
    monkeypatch.setattr(live, "READ_WAIT", 0.2)
    with held.lock:
        assert ask(address, body)[0] == 503
    # released (the backend is about to close): no read reaches it
    registry.release(backend)
    assert ask(address, body)[0] == 404


class HalfwaySlow(KeyedProcessFunction):
    """Applies each record in two updates with a pause between them."""

    def __init__(self, halfway: list[threading.Event]) -> None:
        self.halfway = halfway

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int))

    def process_element(self, value: Any, ctx: Context) -> None:
        i = value.i
        self.total.update(10 * i + 1)  # half of the batch applied...
        self.halfway[i].set()
        time.sleep(0.3)
        self.total.update(10 * i + 2)  # ...and the rest


def test_live_lookup_server_a_read_waits_for_the_batch_being_processed(
    backend: HeapKeyedStateBackend, registry: LiveRegistry
) -> None:
    """The task holds the lock around each batch (its ``batch_guard``): a read between two
    batches sees whole batches, never part of one, and is not kept waiting between them."""
    halfway = [threading.Event() for _ in range(3)]
    task = KeyedOperatorTask(
        HalfwaySlow(halfway), backend, job="j", operator="main", subtask_index=0, parallelism=1
    )
    task.open()
    held, address, key, body = serve(registry, backend, checkpoint_id=0)
    task.batch_guard = held.lock
    seen: list[Any] = []
    inputs_ready = [threading.Event() for _ in range(3)]
    kg = assign_to_key_group(key, MAX_P)

    def run() -> None:
        for i, ready in enumerate(inputs_ready):
            ready.wait(5)  # the task waits for its input without the lock
            batch = pa.RecordBatch.from_pydict({"k": [key], "kg": [kg], "i": [i]})
            task.process_batch(batch, key="k", key_group="kg")

    thread = threading.Thread(target=run)
    thread.start()
    for ready, half in zip(inputs_ready, halfway, strict=True):
        assert ask(address, body)[0] == 200  # between batches: answered at once
        ready.set()
        half.wait(5)  # the read arrives while the batch is half applied: it waits
        status, rows, _ = ask(address, body)
        assert status == 200
        seen.extend(rows.column("value").to_pylist())
    thread.join(5)
    assert seen == [2, 12, 22]


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_live_lookup_server_never_binds_a_wildcard(
    wildcard: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATECORE_LIVE_HOST", wildcard)
    with pytest.raises(ConfigError, match="not the wildcard"):
        bind_host()


def test_live_lookup_server_binds_the_pod_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATECORE_LIVE_HOST", raising=False)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.2")
    assert bind_host() == "127.0.0.2"
    monkeypatch.delenv("SPARK_LOCAL_IP")
    assert bind_host() not in ("0.0.0.0", "::", "")


def test_live_lookup_server_takes_a_free_port_when_the_named_one_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two Python workers of one executor: the first binds STATECORE_LIVE_PORT, the second
    any free port (each task reports its own address)."""
    monkeypatch.setenv("STATECORE_LIVE_HOST", "127.0.0.1")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setenv("STATECORE_LIVE_PORT", str(port))
    server = live.LiveServer(LiveRegistry())
    try:
        host, bound = server.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(bound) not in (0, port)
    finally:
        server.close()
        taken.close()
