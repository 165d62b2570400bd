"""Processes of this machine: whether one still exists (a lease's holder, a warm state host's
executor), and who a lease holder is.

A lease holder is named ``host:pid:token:space`` (:func:`process_owner`). ``space`` identifies
the process id space the pid belongs to: the kernel's boot (``/proc/sys/kernel/random/boot_id``)
and the pid namespace (``/proc/self/ns/pid``). Two containers may share a hostname and both run
their holder as pid 1 (or reuse each other's pids); only a holder of the same ``space`` is one
whose pid can be looked up here (:func:`owner_gone`). Where the space cannot be read (no
``/proc``), it is empty and no holder is ever judged gone by its pid: its lease's expiry decides.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import uuid
from pathlib import Path

__all__ = ["owner_gone", "process_exists", "process_owner", "process_space"]


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine, under any user."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # it exists, under another user (EPERM)
    return True


@functools.cache
def process_space() -> str:
    """An id of this process's pid space (this boot of the kernel and this pid namespace):
    equal for two processes only when a pid means the same process to both; ``""`` when it
    cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    if not boot or not namespace:
        return ""
    return hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:12]


def process_owner(pid: int | None = None) -> str:
    """How a lease names its holder: ``host:pid:token:space`` (``pid`` defaults to this
    process's; ``token`` is random, so two leases of one process differ)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}:{process_space()}"


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (:func:`process_owner`) is provably a process that no longer exists:
    one of this host and of this pid space (:func:`process_space`) whose pid is gone. An owner
    of another space, of an older format (``host:pid:token``) or of a machine without ``/proc``
    is never judged gone here."""
    host, pid, _, space = ([*owner.split(":", 3), "", "", ""])[:4]
    if not space or space != process_space() or host != socket.gethostname():
        return False
    return pid.isdigit() and not process_exists(int(pid))
