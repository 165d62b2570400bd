"""``make test``'s pytest: the suite as five pytest processes side by side, one per group of
``tests/groups.py`` (``--group``): ``weeks`` and ``fortnight`` (the month and the fortnight on
``make up``'s Airflow, 20 to 35 minutes each, mostly waiting: side by side, not one after the
other), ``jvm`` (the tests of the run's one local
Spark session, standalone cluster, S3 server and Kafka broker), ``airflow`` (the other Airflow
tests) and ``rest`` (everything else). On two cores the JVM tests, the Airflow tests (which
mostly wait on their Spark jobs) and the others overlap instead of following each other.

First ``scripts/spark_cds.py`` writes the class-data archive of Spark's driver (about a minute,
once per checkout; its log is ``build/tests/cds.log``), from which the tests' drivers start
faster (``tests/conftest.py``). A failure to write it only costs that speed.

Each group writes to its own log (``--logs``, default ``build/tests/<group>.log``); a line every
few minutes tells how far each got. Once all ended, the logs are printed whole (each with its
summary and ``--durations``), then each group's exit code and wall time. The exit code is 0 only
when every group passed. Ctrl-C reaches every pytest process (one process group), which tear
their fixtures down; SIGTERM is passed on to them as SIGINT for the same reason.

    .venv/bin/python scripts/pytest_groups.py [--logs DIR] [-- extra pytest arguments]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

__all__ = ["GROUPS", "main"]

GROUPS = ("weeks", "fortnight", "jvm", "airflow", "rest")
REPO = Path(__file__).resolve().parents[1]
PROGRESS = re.compile(rb"\[\s*(\d+)%\]")
OUTCOMES = re.compile(rb"[.sxXFE]")
REPORT_EVERY = 300.0
STOP_GRACE = 120.0


@dataclass
class Group:
    name: str
    log: Path
    process: subprocess.Popen[bytes]
    out: IO[bytes]
    began: float = field(default_factory=time.monotonic)
    seconds: float | None = None

    def progress(self) -> str:
        """How far the group got: the tests done (pytest's progress characters) and its last
        ``[ nn%]``, or how it ended."""
        if self.seconds is not None:
            return f"done (exit {self.process.returncode})"
        text = self.log.read_bytes()
        lines = text.split(b"\n=", 1)[0].splitlines()
        done = sum(len(OUTCOMES.findall(PROGRESS.sub(b"", line))) for line in lines)
        found = PROGRESS.findall(text[-4000:])
        return f"{done} tests done" + (f" ({int(found[-1])}%)" if found else "")


def start(name: str, logs: Path, extra: list[str]) -> Group:
    log = logs / f"{name}.log"
    out = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", f"--group={name}", *extra],
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # the log shows progress as it is made
    )
    return Group(name, log, process, out)


def wait(groups: list[Group]) -> None:
    """Until every group ended, noting each one's wall time; a progress line now and then."""
    began = time.monotonic()
    next_report = began + REPORT_EVERY
    while any(g.seconds is None for g in groups):
        time.sleep(1)
        for group in groups:
            if group.seconds is None and group.process.poll() is not None:
                group.seconds = time.monotonic() - group.began
                group.out.close()
        if time.monotonic() >= next_report:
            next_report += REPORT_EVERY
            minutes = (time.monotonic() - began) / 60
            states = ", ".join(f"{g.name} {g.progress()}" for g in groups)
            print(f"pytest groups, {minutes:.0f} min: {states}", flush=True)


def stop(groups: list[Group], *, forward: bool) -> None:
    """Let the groups end after an interrupt: pytest tears its fixtures down on SIGINT, which
    Ctrl-C gave every process of the group already (``forward``: give it now, after SIGTERM).
    One still running ``STOP_GRACE`` seconds later gets SIGINT again, later SIGKILL."""
    steps: list[signal.Signals | None] = [signal.SIGINT if forward else None, signal.SIGINT]
    for signum in [*steps, signal.SIGKILL]:
        running = [g for g in groups if g.process.poll() is None]
        if not running:
            return
        for group in running:
            if signum is not None:
                group.process.send_signal(signum)
        deadline = time.monotonic() + STOP_GRACE
        for group in running:
            try:
                group.process.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=Path, default=REPO / "build" / "tests")
    parser.add_argument("pytest_args", nargs="*", help="passed on to every pytest process")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)

    terminated = False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        nonlocal terminated
        terminated = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    began = time.monotonic()
    print(f"pytest: groups {' and '.join(GROUPS)} side by side, logs in {args.logs}/", flush=True)
    with (args.logs / "cds.log").open("wb") as cds_log:
        cds = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "spark_cds.py")],
            cwd=REPO,
            stdout=cds_log,
            stderr=subprocess.STDOUT,
        )
    cds_lines = (args.logs / "cds.log").read_text(errors="replace").strip().splitlines()
    print(f"class-data archive (exit {cds.returncode}): {cds_lines[-1] if cds_lines else ''}")
    groups = [start(name, args.logs, args.pytest_args) for name in GROUPS]
    interrupted = False
    try:
        wait(groups)
    except KeyboardInterrupt:
        interrupted = True
        stop(groups, forward=terminated)
    total = time.monotonic() - began
    for group in groups:
        if not group.out.closed:
            group.out.close()
        print(f"\n{'=' * 30} pytest --group={group.name} {'=' * 30}", flush=True)
        sys.stdout.buffer.write(group.log.read_bytes())
        sys.stdout.flush()
    print(f"\n{'=' * 30} pytest groups {'=' * 30}")
    for group in groups:
        seconds = group.seconds if group.seconds is not None else total
        print(f"{group.name}: exit {group.process.returncode}, {seconds / 60:.1f} min")
    print(f"all: {total / 60:.1f} min" + (" (interrupted)" if interrupted else ""))
    if interrupted:
        return 130
    return 0 if all(g.process.returncode == 0 for g in groups) else 1


if __name__ == "__main__":
    sys.exit(main())
