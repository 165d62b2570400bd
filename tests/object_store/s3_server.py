"""The test S3 server: moto's S3 API over HTTP on 127.0.0.1, in a process of its own.

``python -m tests.object_store.s3_server`` binds a free port of 127.0.0.1 only, prints it, and
serves until killed. Two things are added in front of moto:

- Writes are applied one at a time. moto checks ``If-None-Match: *`` and then stores the
  object in two steps; S3 does both atomically, which is what Delta's commit protocol relies
  on. Serializing writes gives the test server S3's guarantee.
- A **gate** (``PUT /_gate?prefix=<bucket/key prefix>&parties=<n>``): the next ``n`` writes of
  keys under ``prefix`` wait for each other, then go on together, so ``n`` writers race for
  the same object on the wire (``n`` Delta writers for the same commit file).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, unquote

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

GATE_TIMEOUT = 20.0

_write_lock = threading.Lock()
_gate_lock = threading.Lock()
_gate: dict[str, Any] = {}


def _arm(query: str) -> None:
    params = parse_qs(query)
    with _gate_lock:
        _gate.clear()
        _gate.update(
            prefix=params["prefix"][0],
            barrier=threading.Barrier(int(params["parties"][0]), timeout=GATE_TIMEOUT),
            left=int(params["parties"][0]),
        )


def _wait_at_gate(key: str) -> None:
    with _gate_lock:
        if not _gate or not key.startswith(_gate["prefix"]) or _gate["left"] <= 0:
            return
        _gate["left"] -= 1
        barrier: threading.Barrier = _gate["barrier"]
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass


def application(moto: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ["REQUEST_METHOD"]
        if path == "/_gate" and method == "PUT":
            _arm(environ.get("QUERY_STRING", ""))
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if method in ("GET", "HEAD"):
            return moto(environ, start_response)
        _wait_at_gate(unquote(path.lstrip("/")))
        with _write_lock:
            return list(moto(environ, start_response))

    return app


def main() -> int:
    server = make_server(
        "127.0.0.1", 0, application(DomainDispatcherApplication(create_backend_app)), threaded=True
    )
    print(server.server_port, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
