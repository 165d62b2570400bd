"""Processes of this machine: whether one still exists (a lease's holder, a warm state host's
executor)."""

from __future__ import annotations

import os

__all__ = ["process_exists"]


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine, under any user."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # it exists, under another user (EPERM)
    return True
