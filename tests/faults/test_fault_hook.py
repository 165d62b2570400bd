"""The kill-point hook itself: off it does nothing; armed it SIGKILLs at the nth passage, once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from statecore.snapshot import faults

SCRIPT = """
import sys
from statecore.snapshot.faults import fault_point
for i in range(1, 6):
    fault_point("other")
    fault_point("task:process")
    print(i, flush=True)
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )


def test_fault_point_is_inert_unless_armed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(faults.FAULT_POINT_ENV, raising=False)
    done = _run({"PATH": "", "PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0
    assert done.stdout.split() == ["1", "2", "3", "4", "5"]
    assert faults._ARMED is None  # this test process: nothing armed


def test_fault_point_kills_at_its_nth_passage_once(tmp_path: Path) -> None:
    marker = tmp_path / "fired"
    env = {
        "PYTHONPATH": ":".join(sys.path),
        faults.FAULT_POINT_ENV: "task:process:3",
        faults.FAULT_MARKER_ENV: str(marker),
    }
    killed = _run(env)
    assert killed.returncode == -signal.SIGKILL
    assert killed.stdout.split() == ["1", "2"]
    assert marker.read_text().startswith("task:process:3 pid ")
    again = _run(env)  # the marker exists: a retried attempt passes the point
    assert again.returncode == 0 and again.stdout.split() == ["1", "2", "3", "4", "5"]


def test_fault_point_kills_the_named_process(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        env = {
            "PYTHONPATH": ":".join(sys.path),
            faults.FAULT_POINT_ENV: "task:process",
            faults.FAULT_PID_ENV: str(victim.pid),
        }
        survivor = _run(env)
        assert survivor.returncode == 0  # it killed the driver it names, not itself
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        victim.kill()
