"""Live lookups: the tasks of a running stream serve reads of the state they hold.

Flink's queryable state asks the ``KvStateLocationOracle`` which task holds a key's key group
and reads the state there. Here each Spark Python worker that holds a warm task's backend (see
:mod:`statecore.runtime.warm`) of a job run with ``live_lookups=True`` starts one small HTTP
server (:class:`LiveServer`, a daemon thread). The task reports the server's address with its
snapshot; the driver records it in the catalog (key-group range -> address,
``statecore_live_endpoints``), and :func:`statecore.query.lookup` with ``live=True`` asks the
task holding the key's key group. The answer is the task's state *now*: after the micro-batches
it processed, including one it is processing (between two Arrow batches) and any whose
checkpoint has not completed yet.

A read and the task's processing exclude each other through the held state's lock: the task
holds it (a ``with`` block, its ``KeyedOperatorTask.batch_guard``) around each batch it
processes, the timers it fires and its snapshot, and around closing the backend; it is free
while the task waits for its next input batch and between micro-batches. So a read never sees
a record half applied, and never touches a closed backend. A read that cannot get the lock within
:data:`READ_WAIT` seconds is answered 503 (the client falls back to the latest checkpoint).

Security: each request carries the job's token (``Authorization: Bearer ...``), generated once
per job and kept in the catalog, compared in constant time; a wrong or missing one is 401. The
server binds to one address of the pod network, never a wildcard: ``STATECORE_LIVE_HOST``, else
Spark's ``SPARK_LOCAL_IP``, else the host's primary address (the one its default route leaves
by), else the loopback. ``STATECORE_LIVE_PORT`` names the port (default: any free one); a
second Python worker on the same host, finding it taken, takes any free one.

The reply to ``POST /state`` with ``{"job", "operator", "state", "key_group", "key"}`` (a bytes
key as ``{"key_base64": ...}``) is an Arrow IPC stream of the key's snapshot rows
(:func:`~statecore.backends.base.snapshot_schema`, TTL timestamps included), which the client
turns into a value exactly as a checkpoint lookup does, with the headers
``X-Statecore-Checkpoint`` (the last checkpoint the task snapshotted: the live state is that plus
what came since) and ``X-Statecore-Running`` (``1`` while a micro-batch is being processed).
"""

from __future__ import annotations

import base64
import errno
import hmac
import ipaddress
import json
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pyarrow as pa

from statecore.backends import KeyedStateBackend
from statecore.errors import ConfigError, StateError
from statecore.keygroups import KeyGroupRange

__all__ = [
    "LIVE",
    "LiveRegistry",
    "LiveServer",
    "bind_host",
    "encode_key",
    "decode_key",
]

log = logging.getLogger(__name__)

READ_WAIT = 1.5
"""Seconds a read waits for a task that is processing a batch before it answers 503."""

MAX_REQUEST = 64 * 1024
"""The largest request body a server reads (a key and a few names)."""


def bind_host() -> str:
    """The address a live server binds to (see the module docstring); a wildcard is refused."""
    host = os.environ.get("STATECORE_LIVE_HOST") or os.environ.get("SPARK_LOCAL_IP")
    if not host:
        host = _primary_address()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a host name: it names one address
    if address.is_unspecified:
        raise ConfigError(
            f"live lookups bind to one address of the pod network, not the wildcard {host!r}: "
            "set STATECORE_LIVE_HOST (or SPARK_LOCAL_IP) to the pod's IP"
        )
    return host


def _primary_address() -> str:
    """The address of the host's default route (no packet is sent), else the loopback."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.254.254.254", 1))
        return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


def encode_key(key: Any) -> dict[str, Any]:
    """A key as JSON: ints and strings as they are, bytes in base64."""
    if isinstance(key, bytes):
        return {"key_base64": base64.b64encode(key).decode("ascii")}
    return {"key": key}


def decode_key(body: dict[str, Any]) -> Any:
    if "key_base64" in body:
        return base64.b64decode(body["key_base64"], validate=True)
    if "key" not in body:
        raise ValueError("no key")
    key = body["key"]
    if not isinstance(key, int | str) or isinstance(key, bool):
        raise ValueError(f"a key is an int, a str or bytes, not {type(key).__name__}")
    return key


@dataclass(eq=False)
class _Held:
    """A task's backend as a live server reads it."""

    job: str
    operator: str
    subtask: int
    key_groups: KeyGroupRange
    token: str
    backend: KeyedStateBackend | None
    checkpoint_id: int
    """The last checkpoint the task snapshotted (its restored one before its first)."""
    running: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while the task processes a batch, fires timers or snapshots (its
    ``KeyedOperatorTask.batch_guard``), while it is forgotten, and by a read."""


class LiveRegistry:
    """The task states this process serves, and its server (started with the first)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, int], _Held] = {}
        self._lock = threading.Lock()
        self._server: LiveServer | None = None

    def hold(
        self,
        *,
        job: str,
        operator: str,
        subtask: int,
        key_groups: KeyGroupRange,
        token: str,
        backend: KeyedStateBackend,
        checkpoint_id: int,
    ) -> tuple[_Held, str]:
        """Serve ``backend`` (a task's, while it runs and after, while it is kept warm): the
        held state (its lock guards the backend) and the server's address."""
        with self._lock:
            old = self._held.get((job, operator, subtask))
            if old is not None and old.backend is backend:  # kept warm: one lock throughout
                held, old = old, None
                held.token, held.checkpoint_id, held.running = token, checkpoint_id, True
            else:
                held = _Held(job, operator, subtask, key_groups, token, backend, checkpoint_id)
                self._held[(job, operator, subtask)] = held
            if self._server is None:
                self._server = LiveServer(self)
            address = self._server.address
        if old is not None:
            self._forget(old)
        return held, address

    def snapshotted(self, held: _Held, checkpoint_id: int) -> None:
        """The task snapshotted ``checkpoint_id`` and stopped processing."""
        held.checkpoint_id = checkpoint_id
        held.running = False

    def release(self, backend: KeyedStateBackend) -> None:
        """Stop serving ``backend`` (before it is closed); waits for a read in progress."""
        with self._lock:
            gone = [k for k, h in self._held.items() if h.backend is backend]
            held = [self._held.pop(k) for k in gone]
        for h in held:
            self._forget(h)

    @staticmethod
    def _forget(held: _Held) -> None:
        with held.lock:
            held.backend = None

    def find(self, job: str, operator: str, key_group: int) -> list[_Held]:
        """The held states of ``job``: those of ``operator`` holding ``key_group`` first."""
        with self._lock:
            of_job = [h for h in self._held.values() if h.job == job]
        return sorted(
            of_job,
            key=lambda h: not (h.operator == operator and key_group in h.key_groups),
        )

    def clear(self) -> None:
        with self._lock:
            held = list(self._held.values())
            self._held.clear()
        for h in held:
            self._forget(h)


class LiveServer:
    """A threaded HTTP server for a :class:`LiveRegistry`, on :func:`bind_host`."""

    def __init__(self, registry: LiveRegistry) -> None:
        host = bind_host()
        port = int(os.environ.get("STATECORE_LIVE_PORT", "0"))
        handler = type("_Handler", (_Handler,), {"registry": registry})
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("_Server", (ThreadingHTTPServer,), {"address_family": family})
        try:
            self._httpd = server_class((host, port), handler)
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            # another Python worker of this executor took the port: any free one (the catalog
            # records the address each task reports)
            self._httpd = server_class((host, 0), handler)
        self._httpd.daemon_threads = True
        bound_host, bound_port = self._httpd.server_address[:2]
        self.address = (
            f"[{bound_host}]:{bound_port}"
            if family == socket.AF_INET6
            else (f"{bound_host}:{bound_port}")
        )
        threading.Thread(
            target=self._httpd.serve_forever, name="statecore-live", daemon=True
        ).start()
        log.info("live lookups served at %s", self.address)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    registry: LiveRegistry
    server_version = "statecore-live"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("live lookup %s: " + format, self.client_address[0], *args)

    def do_POST(self) -> None:
        if self.path != "/state":
            return self._error(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}")
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if not 0 < length <= MAX_REQUEST:
                raise ValueError(f"a body of {length} bytes")
            body = json.loads(self.rfile.read(length))
            job, operator, state = (str(body[n]) for n in ("job", "operator", "state"))
            key_group = int(body["key_group"])
            key = decode_key(body)
        except (ValueError, KeyError, TypeError) as exc:
            return self._error(HTTPStatus.BAD_REQUEST, f"bad request: {exc}")
        candidates = self.registry.find(job, operator, key_group)
        if not candidates:
            return self._error(HTTPStatus.NOT_FOUND, f"no state of job {job!r} is held here")
        token = self.headers.get("Authorization", "").removeprefix("Bearer ").encode()
        if not hmac.compare_digest(token, candidates[0].token.encode()):
            return self._error(HTTPStatus.UNAUTHORIZED, "a wrong or missing token")
        held = candidates[0]
        if held.operator != operator or key_group not in held.key_groups:
            return self._error(
                HTTPStatus.NOT_FOUND, f"key group {key_group} of {operator!r} is not held here"
            )
        if not held.lock.acquire(timeout=READ_WAIT):
            return self._error(HTTPStatus.SERVICE_UNAVAILABLE, "the task is busy")
        try:
            if held.backend is None:
                return self._error(HTTPStatus.NOT_FOUND, "the task's state was released")
            rows, _ = held.backend.snapshot_changes(state, key_group, [key])
            checkpoint_id, running = held.checkpoint_id, held.running
        except (StateError, ConfigError, pa.ArrowException) as exc:
            return self._error(HTTPStatus.BAD_REQUEST, str(exc))
        finally:
            held.lock.release()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        payload = sink.getvalue().to_pybytes()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/vnd.apache.arrow.stream")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Statecore-Checkpoint", str(checkpoint_id))
        self.send_header("X-Statecore-Running", "1" if running else "0")
        self.send_header("X-Statecore-Subtask", str(held.subtask))
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: HTTPStatus, message: str) -> None:
        payload = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


LIVE = LiveRegistry()
"""The registry of this process (a Spark Python worker keeps it between tasks)."""
