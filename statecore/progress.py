"""Progress of long operations: a callback that takes one line of text.

The library reports through it and never prints; the command line passes :func:`to_stderr`, an
Airflow operator passes its task logger.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["Progress", "silent", "to_stderr"]

Progress = Callable[[str], None]


def silent(message: str) -> None:
    """Report nothing."""


def to_stderr(message: str) -> None:
    """One line on standard error, so that results on standard output stay machine-readable."""
    print(f"statecore: {message}", file=sys.stderr, flush=True)
