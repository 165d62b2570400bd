"""Timing and memory: one :class:`Sample` per variant run, and the peak RSS it took.

A process tree's memory is measured twice (:class:`TreeRss`): the sum of its processes' RSS,
which counts a page shared by several processes (PySpark's Python workers are forked from its
daemon and share its imported modules copy-on-write) once in each, and the sum of their PSS
(``/proc/PID/smaps_rollup``), which splits each shared page among the processes mapping it: the
tree's real share of the machine's memory. For one process alone the two are nearly equal.

In-process variants run in a fresh child process each (forked from a clean fork server, before
Spark starts), so their peak RSS is their own. Spark variants run in the harness's one Spark
session; their peak RSS is the sampled total of the process tree (driver Python, JVM, Python
workers) while they run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Sample",
    "TreeRss",
    "best_of",
    "process_kind",
    "run_measured",
    "run_isolated",
    "self_peak_rss",
    "settle",
    "tree_cpu_seconds",
]

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Sample:
    """One run of one variant."""

    variant: str
    seconds: float
    events: int
    peak_rss: int | None = None  # bytes
    peak_pss: int | None = None  # bytes: the tree's proportional share, where it was measured
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("nan")


def self_peak_rss() -> int:
    """This process's peak RSS in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _call_and_measure(function: Callable[..., Sample], args: tuple[Any, ...]) -> Sample:
    sample = function(*args)
    sample.peak_rss = self_peak_rss()
    return sample


def best_of(inner: int, function: Callable[..., Sample], *args: Any) -> Sample:
    """Run ``function(*args)`` ``inner`` times here; the fastest sample, with every time kept.

    For sub-second in-process runs the fastest is the one least disturbed by other work on a
    shared machine; each call builds its own fresh state.
    """
    samples = [function(*args) for _ in range(max(1, inner))]
    best = min(samples, key=lambda s: s.seconds)
    best.extra["inner_seconds"] = [round(s.seconds, 4) for s in samples]
    return best


_CONTEXT = multiprocessing.get_context("forkserver")


def start_fork_server() -> None:
    """Start the fork server now, while this process is small and has no JVM or threads."""
    with ProcessPoolExecutor(1, mp_context=_CONTEXT, max_tasks_per_child=1) as pool:
        pool.submit(os.getpid).result()


def run_isolated(function: Callable[..., Sample], *args: Any) -> Sample:
    """Run ``function(*args)`` in a fresh child process; the sample carries its peak RSS."""
    with ProcessPoolExecutor(1, mp_context=_CONTEXT, max_tasks_per_child=1) as pool:
        return pool.submit(_call_and_measure, function, args).result()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    """``pid``'s proportional set size in bytes (0 when it has gone or cannot be read)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def process_kind(pid: int, root: int) -> str:
    """What a process of a measured tree is: ``JVM``, ``Python worker`` (PySpark's daemon and
    its workers), ``warm host`` (statecore's state hosts), ``driver Python`` (the tree's root
    when it is Python) or ``other``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    words = [a.decode(errors="replace") for a in argv if a]
    program = Path(words[0]).name if words else ""
    if program == "java":
        return "JVM"
    if any(w.startswith("pyspark.") for w in words):
        return "Python worker"
    if "statecore.spark.host_server" in words:
        return "warm host"
    if program.startswith("python"):
        return "driver Python" if pid == root else "Python worker"
    return "other"


Parts = dict[str, tuple[int, int]]
"""Memory of a tree split by :func:`process_kind`: kind -> (bytes, processes)."""


def _parts_text(parts: Parts) -> str:
    return ", ".join(
        f"{'' if count == 1 else f'{count} '}{kind} {size / 2**20:,.0f} MiB"
        for kind, (size, count) in sorted(parts.items(), key=lambda kv: -kv[1][0])
    )


class TreeRss:
    """Samples the memory of a process and its descendants in a background thread.

    ``peak`` is the largest sum of RSS seen, ``parts`` that sample split by
    :func:`process_kind` (bytes and process count per kind), so a result says where the memory
    went (the JVM, each kind of Python process). ``peak_pss`` and ``pss_parts`` are the same for
    the sum of PSS (each shared page divided among the processes that map it): the tree's own
    share of memory, which RSS overstates by the pages its processes share."""

    def __init__(self, root: int | None = None, interval: float = 0.2) -> None:
        self.root = root or os.getpid()
        self.interval = interval
        self.peak = 0
        self.parts: Parts = {}
        self.peak_pss = 0
        self.pss_parts: Parts = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        tree = _children()
        rss: Parts = {}
        pss: Parts = {}
        todo = [self.root]
        while todo:
            pid = todo.pop()
            kind = process_kind(pid, self.root)
            for parts, size in ((rss, _rss(pid)), (pss, _pss(pid))):
                total, count = parts.get(kind, (0, 0))
                parts[kind] = (total + size, count + 1)
            todo.extend(tree.get(pid, ()))
        total = sum(size for size, _ in rss.values())
        if total > self.peak:
            self.peak, self.parts = total, rss
        total = sum(size for size, _ in pss.values())
        if total > self.peak_pss:
            self.peak_pss, self.pss_parts = total, pss

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def parts_text(self) -> str:
        """``parts`` as text, largest first: ``JVM 812 MiB, 2 Python worker 140 MiB, ...``."""
        return _parts_text(self.parts)

    def pss_parts_text(self) -> str:
        """``pss_parts`` as text, as :meth:`parts_text`."""
        return _parts_text(self.pss_parts)


def clock() -> float:
    return time.perf_counter()


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds used so far by ``root`` (default: this process) and its live descendants."""
    tree = _children()
    total, todo = 0.0, [root or os.getpid()]
    while todo:
        pid = todo.pop()
        total += _cpu_seconds(pid)
        todo.extend(tree.get(pid, ()))
    return total


def settle(*, idle_cores: float = 0.2, window: float = 1.0, timeout: float = 120.0) -> float:
    """Wait until this process tree (the JVM and its Python workers included) is idle; the
    seconds waited. A Spark variant leaves work behind (garbage collection, state-store
    maintenance, exiting workers) that would otherwise be billed to the next variant."""
    start = clock()
    while clock() - start < timeout:
        before = tree_cpu_seconds()
        time.sleep(window)
        if (tree_cpu_seconds() - before) / window < idle_cores:
            break
    return clock() - start


def run_measured(
    command: list[str], *, name: str, cwd: Path, env: dict[str, str] | None = None, timeout: float
) -> tuple[dict[str, Any], TreeRss]:
    """Run ``command`` as a process tree of its own, its peak RSS sampled from start to exit; the
    last line of JSON it printed, and the sample. A failed or silent run raises, naming ``name``
    and quoting the end of its stderr."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env
    ) as process:
        with TreeRss(root=process.pid) as rss:
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"{name} exited with {process.returncode}: {stderr[-3000:]}")
    return json.loads(lines[-1]), rss
