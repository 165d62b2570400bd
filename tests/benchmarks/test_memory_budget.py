"""Memory: the harness's measure of a process tree (``benchmarks.measure.TreeRss``), the same for
Java Flink's JVM and statecore's local run, and what a local run's process tree takes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.measure import TreeRss, process_kind, run_measured

MIB = 2**20
HOLD = 200 * MIB


def _holder(size: int) -> subprocess.Popen[str]:
    """A Python child that touches ``size`` bytes, says so, and keeps them until stdin closes."""
    code = (
        f"import sys; b = bytearray({size}); b[::4096] = b'x' * len(b[::4096]); "
        "print('held', flush=True); sys.stdin.read()"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _sampled_tree(code: str) -> TreeRss:
    """The tree of a Python root running ``code``, sampled for half a second once it printed
    ``held``; the root ends when its stdin closes."""
    root = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert root.stdout is not None and root.stdout.readline().strip() == "held"
        with TreeRss(root=root.pid) as rss:
            time.sleep(0.5)
    finally:
        root.communicate("")
    return rss


def test_memory_budget_tree_rss_counts_each_process_of_the_tree() -> None:
    # a tree of its own (a Python root holding two Python children), not this test process's:
    # a test run's process has children of its own (Spark's workers, servers of other tests)
    code = (
        "import subprocess, sys\n"
        "def hold(size):\n"
        "    code = ('import sys; b = bytearray(%d); b[::4096] = b\"x\" * len(b[::4096]); '\n"
        "            'print(\"held\", flush=True); sys.stdin.read()') % size\n"
        "    return subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE,\n"
        "                            stdout=subprocess.PIPE, text=True)\n"
        f"children = [hold({HOLD}), hold({HOLD // 2})]\n"
        "for child in children:\n"
        "    child.stdout.readline()\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
        "for child in children:\n"
        "    child.communicate('')\n"
    )
    rss = _sampled_tree(code)
    size, count = rss.parts["Python worker"]  # the Python children of the tree's Python root
    assert count == 2 and size >= HOLD + HOLD // 2
    driver, one = rss.parts["driver Python"]
    assert one == 1 and rss.peak == size + driver
    assert "2 Python worker" in rss.parts_text()


def test_memory_budget_peak_of_a_root_that_exits_is_kept() -> None:
    child = _holder(HOLD)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    with TreeRss(root=child.pid, interval=0.05) as rss:
        time.sleep(0.3)
        child.communicate("")
    assert rss.peak >= HOLD  # sampled while it held its memory, kept after it exited
    assert set(rss.parts) == {"driver Python"}  # the root itself: a Python process


def test_memory_budget_process_kinds() -> None:
    java = subprocess.Popen(["sleep", "5"])  # not Java, not Python
    try:
        assert process_kind(java.pid, root=0) == "other"
    finally:
        java.kill()
        java.wait()
    assert process_kind(2**22 + 7, root=0) == "other"  # no such process


def test_memory_budget_run_measured_reads_the_tree_and_its_result(tmp_path: Path) -> None:
    code = (
        f"import time; b = bytearray({HOLD}); b[::4096] = b'x' * len(b[::4096]); "
        "time.sleep(0.5); print('{\"n\": 1}')"
    )
    holder = [sys.executable, "-c", code]
    result, rss = run_measured(holder, name="holder", cwd=tmp_path, timeout=60)
    assert result == {"n": 1} and rss.peak >= HOLD
    failing = "import sys; print('gone', file=sys.stderr); sys.exit(3)"
    with pytest.raises(RuntimeError, match="failing exited with 3: gone"):
        run_measured([sys.executable, "-c", failing], name="failing", cwd=tmp_path, timeout=60)


@pytest.mark.slow
def test_memory_budget_local_run_tree_of_a_small_heap_run(tmp_path: Path) -> None:
    """A small per-record heap run on statecore's local defaults (``benchmarks.memory``, its
    own process tree, its output verified) stays within what its parts are sized for: one
    driver Python, Spark's one JVM (its default 1 GiB heap plus what a JVM takes beside it), and
    PySpark's daemon with one worker per core of ``local[2]``; no other process."""
    from benchmarks.memory import statecore_heap_tree
    from benchmarks.workload import Workload

    workload, warm = Workload.prepare(20_000, tmp_path), Workload.prepare(2_000, tmp_path)
    sample = statecore_heap_tree(workload, warm, tmp_path / "run")
    parts = sample.extra["parts"]  # kind -> (bytes, processes) at the peak
    assert set(parts) <= {"JVM", "Python worker", "driver Python", "other"}, parts
    assert parts["JVM"][1] == 1 and parts["driver Python"][1] == 1
    assert parts["Python worker"][1] <= 3  # PySpark's daemon and a worker per core
    budget = {"JVM": (1024 + 512) * MIB, "Python worker": 3 * 250 * MIB, "driver Python": 300 * MIB}
    over = {kind: size for kind, (size, _) in parts.items() if size > budget.get(kind, 16 * MIB)}
    assert not over, sample.extra["memory"]
    # the workers share their daemon's pages: the tree's PSS is below its summed RSS
    assert sample.peak_pss is not None and 0 < sample.peak_pss < sample.peak_rss


def test_memory_budget_pss_counts_pages_shared_by_forked_workers_once() -> None:
    # the shape of PySpark's workers: a Python process that holds memory, then forks two children
    # that only read it (copy-on-write); RSS counts the shared pages in each of the three, PSS
    # splits them among the three
    code = (
        "import os, sys\n"
        f"b = bytearray({HOLD}); b[::4096] = b'x' * len(b[::4096])\n"
        "children = []\n"
        "for _ in range(2):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        sys.stdin.read(); os._exit(0)\n"
        "    children.append(pid)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
    )
    rss = _sampled_tree(code)
    assert rss.parts["Python worker"][1] == 2 and rss.pss_parts["Python worker"][1] == 2
    assert rss.peak >= 3 * HOLD  # each of the three processes maps the held pages
    assert HOLD <= rss.peak_pss < rss.peak - HOLD  # the tree holds them once
    assert sum(size for size, _ in rss.pss_parts.values()) == rss.peak_pss
    assert "2 Python worker" in rss.pss_parts_text()


def test_memory_budget_pss_of_one_process_is_near_its_rss() -> None:
    code = (
        f"import sys; b = bytearray({HOLD}); b[::4096] = b'x' * len(b[::4096]); "
        "print('held', flush=True); sys.stdin.read()"
    )
    rss = _sampled_tree(code)
    # alone, a process shares only its libraries' pages with others: its PSS is at most its RSS
    # and holds at least what it touched
    assert HOLD <= rss.peak_pss <= rss.peak


def test_memory_budget_report_compares_the_target_on_pss_and_keeps_rss_beside_it() -> None:
    from datetime import UTC, datetime

    from benchmarks.measure import Sample
    from benchmarks.report import JAVA_HASHMAP, MEMORY, Results, flink_section

    def sample(variant: str, rss: int, pss: int | None) -> Sample:
        memory: dict[str, object] = {"memory": f"JVM {rss} MiB", "memory_pss": f"JVM {pss} MiB"}
        if variant == JAVA_HASHMAP:
            memory["final_checkpoint_seconds"] = 0.1
        return Sample(variant, 10.0, 1000, rss * MIB, pss and pss * MIB, extra=memory)

    results = Results(
        events=1000, repeats=1, command="python -m benchmarks.run", failures={}, machine={},
        samples=[[sample(MEMORY, 1600, 1100), sample(JAVA_HASHMAP, 800, 790)]],
        started=datetime.now(UTC), seconds=1.0, backends=["heap"],
    )  # fmt: skip
    lines = "\n".join(flink_section(results))
    assert f"1.39× (runs: {1100 / 790:.2f}) | ≤ 1.5× | met" in lines  # PSS: 1100 / 790
    assert f"2.00× (runs: {1600 / 800:.2f}) | info" in lines  # RSS, kept beside it
    assert "PSS 1,100 MiB (JVM 1100 MiB); RSS 1,600 MiB (JVM 1600 MiB)" in lines
    unmeasured = Results(
        events=1000, repeats=1, command="c", failures={}, machine={},
        samples=[[sample(MEMORY, 1600, None), sample(JAVA_HASHMAP, 800, 790)]],
        started=datetime.now(UTC), seconds=1.0, backends=["heap"],
    )  # fmt: skip
    assert results.paired_memory_ratio(MEMORY, JAVA_HASHMAP, pss=True) is not None
    assert unmeasured.paired_memory_ratio(MEMORY, JAVA_HASHMAP, pss=True) is None
