"""The test S3 server (:mod:`tests.object_store.s3_server`) started in a subprocess: what the
suite's ``s3_server`` fixture and the S3 benchmarks run.

The credentials are made up per start and reach statecore only through the environment (as the
Helm chart's secret does), so a test can grep for them everywhere statecore writes.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class S3Server:
    port: int
    env: dict[str, str]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def secret(self) -> str:
        return self.env["AWS_SECRET_ACCESS_KEY"]

    def filesystem(self) -> pafs.S3FileSystem:
        """A filesystem of the test's own (not statecore's), to look at the buckets."""
        return pafs.S3FileSystem(
            access_key=self.env["AWS_ACCESS_KEY_ID"],
            secret_key=self.secret,
            region=self.env["AWS_REGION"],
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            allow_bucket_creation=True,
        )

    def gate(self, prefix: str, parties: int = 2) -> None:
        """Hold the next ``parties`` writes under ``prefix`` until all have arrived."""
        request = urllib.request.Request(
            f"{self.endpoint}/_gate?prefix={prefix}&parties={parties}", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def gate_outcome(self) -> str:
        """How the last gate went: ``met``, ``broken`` (a write waited alone until the
        server's timeout), ``armed`` or ``none``."""
        return self._call("_gate", "GET")

    def throttle(
        self, prefix: str, count: int, methods: str = "", *, applied: bool = False
    ) -> None:
        """Answer the first request under ``prefix`` (``bucket/key prefix``; of ``methods``,
        e.g. ``"PUT,POST"``; default all) and its retries ``503 SlowDown``, ``count`` times;
        ``applied``: apply each first (its answer is lost)."""
        self._call(
            f"_throttle?prefix={prefix}&count={count}&methods={methods}&applied={int(applied)}",
            "PUT",
        )

    def throttled(self) -> list[str]:
        """The requests answered ``503 SlowDown`` since the last :meth:`unthrottle`
        (``METHOD bucket/key``)."""
        return self._call("_throttle", "GET").splitlines()

    def unthrottle(self) -> list[str]:
        """Drop every throttling rule; the requests throttled."""
        return self._call("_throttle", "DELETE").splitlines()

    def _call(self, path: str, method: str) -> str:
        request = urllib.request.Request(f"{self.endpoint}/{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(response.read().decode())


@contextmanager
def running_s3_server(buckets: Sequence[str], *, environ: bool = False) -> Iterator[S3Server]:
    """moto's S3 server in a subprocess, bound to 127.0.0.1, with ``buckets``; with
    ``environ``, its settings are this process's environment while it runs (as they were
    afterwards)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.object_store.s3_server"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    saved = dict(os.environ)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        server = S3Server(
            port,
            {
                "AWS_ACCESS_KEY_ID": f"SCTEST{secrets.token_hex(6).upper()}",
                "AWS_SECRET_ACCESS_KEY": f"sc-secret-{secrets.token_hex(12)}",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                "AWS_ALLOW_HTTP": "true",
            },
        )
        fs = server.filesystem()
        for bucket in buckets:
            fs.create_dir(bucket)
        if environ:
            for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_S3_ALLOW_UNSAFE_RENAME"):
                os.environ.pop(name, None)
            os.environ.update(server.env)
        yield server
    finally:
        if environ:
            os.environ.clear()
            os.environ.update(saved)
        process.kill()
        process.wait(timeout=10)
