"""The test S3 server: moto's S3 API over HTTP on 127.0.0.1, in a process of its own.

``python -m tests.object_store.s3_server`` binds a free port of 127.0.0.1 only, prints it, and
serves until killed. Two things are added in front of moto:

- Writes are applied one at a time. moto checks ``If-None-Match: *`` and then stores the
  object in two steps; S3 does both atomically, which is what Delta's commit protocol relies
  on. Serializing writes gives the test server S3's guarantee.
- A **gate** (``PUT /_gate?prefix=<bucket/key prefix>&parties=<n>``): the next ``n`` writes of
  keys under ``prefix`` wait for each other, then go on together, so ``n`` writers race for
  the same object on the wire (``n`` Delta writers for the same commit file). ``GET /_gate``
  says how the last gate went: ``met`` (the ``n`` writes arrived together), ``broken`` (a
  write waited ``GATE_TIMEOUT`` seconds for the others), ``armed`` (not yet), ``none``.
- **Throttling** (``PUT /_throttle?prefix=<bucket/key prefix>&count=<n>[&methods=PUT,POST]``):
  the first request under ``prefix`` (of the given methods; default every method; a listing
  counts under its ``prefix``) and its next ``n - 1`` attempts answer ``503 SlowDown`` with
  S3's XML error body, as S3 does when a prefix takes more requests than it can: one request
  throttled ``n`` times. Each ``PUT`` adds a rule (a request uses the first that matches);
  ``GET /_throttle`` lists the requests throttled (``METHOD bucket/key`` a line),
  ``DELETE /_throttle`` too, and drops every rule. With ``&applied=1`` the request is applied
  first and its answer replaced by ``503``: a request whose outcome the client cannot know.
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
_throttle_lock = threading.Lock()
_throttles: list[dict[str, Any]] = []
_throttled_log: list[str] = []

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message>"
    b"<RequestId>THROTTLED</RequestId><HostId>test-s3-server</HostId></Error>"
)


def _arm(query: str) -> None:
    params = parse_qs(query)
    with _gate_lock:
        _gate.clear()
        _gate.update(
            prefix=params["prefix"][0],
            barrier=threading.Barrier(int(params["parties"][0]), timeout=GATE_TIMEOUT),
            left=int(params["parties"][0]),
            outcome="armed",
        )


def _wait_at_gate(key: str) -> None:
    with _gate_lock:
        if not _gate or not key.startswith(_gate["prefix"]) or _gate["left"] <= 0:
            return
        _gate["left"] -= 1
        barrier: threading.Barrier = _gate["barrier"]
    try:
        barrier.wait()
        outcome = "met"  # the parties arrived together
    except threading.BrokenBarrierError:
        outcome = "broken"  # one waited GATE_TIMEOUT seconds alone
    with _gate_lock:
        if _gate.get("barrier") is barrier and _gate["outcome"] != "broken":
            _gate["outcome"] = outcome


def _arm_throttle(query: str) -> None:
    params = parse_qs(query)
    methods = params.get("methods", [""])[0]
    with _throttle_lock:
        _throttles.append(
            {
                "prefix": params["prefix"][0],
                "left": int(params["count"][0]),
                "methods": tuple(m for m in methods.upper().split(",") if m),
                "key": None,
                "applied": params.get("applied", ["0"])[0] == "1",
            }
        )


def _throttled(method: str, key: str) -> dict[str, Any] | None:
    """The rule that throttles this request, if one does."""
    with _throttle_lock:
        for rule in _throttles:
            if (
                rule["left"] > 0
                and key.startswith(rule["prefix"])
                and rule["key"] in (None, key)
                and (not rule["methods"] or method in rule["methods"])
            ):
                rule["left"] -= 1
                rule["key"] = key
                _throttled_log.append(f"{method} {key}")
                return rule
        return None


def _slow_down(
    environ: dict[str, Any], start_response: Callable[..., Any], *, drain: bool = True
) -> Iterable[bytes]:
    stream = environ.get("wsgi.input")
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if drain and stream is not None and length:
        stream.read(length)  # the client sent its body; S3 reads it too
    start_response(
        "503 Slow Down",
        [("Content-Type", "application/xml"), ("Content-Length", str(len(SLOW_DOWN)))],
    )
    return [b""] if environ["REQUEST_METHOD"] == "HEAD" else [SLOW_DOWN]


def _request_key(environ: dict[str, Any]) -> str:
    """``bucket/key`` of a request; of a listing, ``bucket/<its prefix>``."""
    key = unquote(environ.get("PATH_INFO", "").lstrip("/"))
    listed = parse_qs(environ.get("QUERY_STRING", "")).get("prefix")
    return f"{key.rstrip('/')}/{listed[0]}" if listed and "/" not in key else key


def application(moto: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ["REQUEST_METHOD"]
        if path == "/_gate" and method == "PUT":
            _arm(environ.get("QUERY_STRING", ""))
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
        if path == "/_gate" and method == "GET":
            with _gate_lock:
                body = str(_gate.get("outcome", "none")).encode()
            start_response("200 OK", [("Content-Length", str(len(body)))])
            return [body]
        if path == "/_throttle":
            if method == "PUT":
                _arm_throttle(environ.get("QUERY_STRING", ""))
            with _throttle_lock:
                body = "\n".join(_throttled_log).encode()
                if method == "DELETE":
                    _throttles.clear()
                    _throttled_log.clear()
            start_response("200 OK", [("Content-Length", str(len(body)))])
            return [body]
        rule = _throttled(method, _request_key(environ))
        if rule is not None and rule["applied"]:  # applied, but its answer is lost
            with _write_lock:
                list(moto(environ, lambda *args: None))
            return _slow_down(environ, start_response, drain=False)  # moto read the body
        if rule is not None:
            return _slow_down(environ, start_response)
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
