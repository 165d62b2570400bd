"""Deterministic kill points for the fault suite: ``fault_point(name)`` at each phase of a run.

Off (the default) a point costs one call and one test of a module constant. The environment of
the process (and of the Spark workers it starts, which inherit it) arms one point:

``STATECORE_FAULT_POINT=name[:nth]``
    the point to fire, at its ``nth`` passage in a process (default 1), e.g. ``task:process:3``
    or ``commit:keyed:total:after``;
``STATECORE_FAULT_PID``
    the process to SIGKILL (default: the one reaching the point; a Spark job's driver sets its
    own pid here before Spark starts, so that a point in a task kills the driver);
``STATECORE_FAULT_MARKER``
    a file created when the point fires: it fires only if the file did not exist, so once over
    all processes and task attempts, and the file tells which process reached it.

The points, in the order of a run (``<kind>`` is ``keyed``, ``operator`` or ``timers``):

=====================================  ===================================================
``catalog:begin``                      the checkpoint is IN_PROGRESS in the catalog
``task:process``                       a task processed one more Arrow (or keyed) batch
``task:snapshot``                      a task wrote one more snapshot file (any state)
``catalog:pending``                    the output files recorded as pending output commits
``commit:<kind>:<state>:before`` /     around the Delta commit of one state's table
``commit:<kind>:<state>:after``
``catalog:states``                     every state table committed
``catalog:complete:before`` /          around the catalog completion (which registers the
``catalog:complete:after``             states in the same transaction)
``output:commit:before`` / ``:after``  around an output (or late-data) table's Delta commit,
                                       after the completion (and in a roll-forward); the
                                       staged files are in the table's folder already
``output:staged:drop``                 the commit verified in the table, before its staged
                                       files are deleted
=====================================  ===================================================
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["FAULT_POINT_ENV", "FAULT_PID_ENV", "FAULT_MARKER_ENV", "fault_point"]

FAULT_POINT_ENV = "STATECORE_FAULT_POINT"
FAULT_PID_ENV = "STATECORE_FAULT_PID"
FAULT_MARKER_ENV = "STATECORE_FAULT_MARKER"


def _parse(spec: str) -> tuple[str, int]:
    name, _, nth = spec.rpartition(":")
    if name and nth.isdigit() and int(nth) > 0:
        return name, int(nth)
    return spec, 1


_ARMED = os.environ.get(FAULT_POINT_ENV) or None
_NAME, _NTH = _parse(_ARMED) if _ARMED else ("", 0)
_passed = 0
_lock = threading.Lock()


def fault_point(name: str) -> None:
    """SIGKILL the process named by the environment when it arms ``name`` (see the module)."""
    if _ARMED is not None:
        _reach(name)


def _reach(name: str) -> None:
    global _passed
    if name != _NAME:
        return
    with _lock:
        _passed += 1
        if _passed != _NTH:
            return
        marker = os.environ.get(FAULT_MARKER_ENV)
        if marker:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return  # fired already (in another process, or an earlier task attempt)
            os.write(fd, f"{name}:{_NTH} pid {os.getpid()}\n".encode())
            os.close(fd)
        target = int(os.environ.get(FAULT_PID_ENV) or os.getpid())
        os.write(2, f"statecore fault point {name}:{_NTH}: SIGKILL {target}\n".encode())
        os.kill(target, signal.SIGKILL)
