"""A keyed running sum whose second subtask can pause mid-checkpoint, run in its own process.

``python -m tests.ops.slowjob JOB CHECKPOINT_ID PAUSE_DIR`` runs one checkpoint with the
in-process runner (``STATECORE_HOME`` from the environment). Subtask 0 processes and writes its
snapshot files first; subtask 1 then creates ``PAUSE_DIR/paused`` and waits for
``PAUSE_DIR/go`` before it processes anything, so the checkpoint is IN_PROGRESS with files
written but not committed for as long as the test wants.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from tests.conftest import REPO
from tests.inprocess import run_checkpoint

RECORDS = [(f"user-{i % 40}", float(i)) for i in range(400)]


class PausingSum(KeyedProcessFunction):
    """``(key, total)`` per record; subtask 1 waits for ``pause_dir/go`` when it opens."""

    def __init__(self, pause_dir: str | None = None) -> None:
        self.pause_dir = pause_dir

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", float))
        if self.pause_dir is not None and ctx.subtask_index == 1:
            folder = Path(self.pause_dir)
            (folder / "paused").touch()
            deadline = time.monotonic() + 120
            while not (folder / "go").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{folder / 'go'} never appeared")
                time.sleep(0.05)

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = (self.total.value() or 0.0) + value
        self.total.update(total)
        yield ctx.current_key, total


def run(
    config: StatecoreConfig, job: str, checkpoint_id: int, pause_dir: str | None = None
) -> dict[str, float]:
    """One checkpoint of :data:`RECORDS`; the last total per key."""
    outputs, _ = run_checkpoint(
        config, PausingSum(pause_dir), RECORDS, job=job, checkpoint_id=checkpoint_id
    )
    return dict(outputs)


def totals(times: int) -> dict[str, float]:
    """The totals after ``times`` checkpoints of :data:`RECORDS`."""
    out: dict[str, float] = {}
    for key, value in RECORDS:
        out[key] = out.get(key, 0.0) + value
    return {k: v * times for k, v in out.items()}


def start_paused(
    config: StatecoreConfig, job: str, checkpoint_id: int, pause: Path
) -> subprocess.Popen[bytes]:
    """Run checkpoint ``checkpoint_id`` in another process; return once it is paused."""
    pause.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, STATECORE_HOME=config.home, PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.ops.slowjob", job, str(checkpoint_id), str(pause)],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while not (pause / "paused").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the run never paused: {process.communicate()[1].decode()}")
        time.sleep(0.05)
    return process


def finish(process: subprocess.Popen[bytes], pause: Path) -> None:
    """Let the paused run go on, and wait until it succeeded."""
    (pause / "go").touch()
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err.decode()


if __name__ == "__main__":
    job, checkpoint_id, pause_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    run(StatecoreConfig.resolve(), job, checkpoint_id, pause_dir)
