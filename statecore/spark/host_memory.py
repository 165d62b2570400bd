"""The memory bound of a warm state host (:mod:`statecore.spark.host`).

A host is a process beside Spark's Python workers, in a session of its own: a cluster manager
that counts a container's memory by its cgroup (Kubernetes, YARN with cgroups) counts it, one
that walks the executor's process tree (YARN's default monitor) does not once the worker that
started it has exited. So a host bounds itself: after each task it reads its resident memory
and, when that is over :func:`memory_bound`, it exits (its socket removed first, the tasks
already waiting served), closing what it kept. The subtask's next task starts a new host, which
restores from the checkpoint (a cold restore, as without hosts): nothing is lost, the stream
only gives up warmth for that subtask while its state is over the bound.

The bound is ``STATECORE_HOST_MAX_MEMORY`` (bytes, or a number with ``k``, ``m``, ``g`` or
``t``), else the Python memory Spark gives each worker (``spark.executor.pyspark.memory``
divided by the executor's cores, which Spark passes as ``PYSPARK_EXECUTOR_MEMORY_MB``), else
2 GiB. An executor's hosts keep at most ``STATECORE_MAX_HOSTS`` (default 8) times the bound
between tasks: size ``spark.executor.memoryOverhead`` (or ``spark.executor.pyspark.memory``)
for it.
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Mapping

from statecore.errors import ConfigError

__all__ = ["DEFAULT_MEMORY", "MEMORY_ENV", "memory_bound", "over_bound", "resident_bytes"]

MEMORY_ENV = "STATECORE_HOST_MAX_MEMORY"
PYSPARK_MEMORY_ENV = "PYSPARK_EXECUTOR_MEMORY_MB"
"""Set by Spark in its Python workers (and so in the hosts they start) when
``spark.executor.pyspark.memory`` is: each worker's share, in MiB."""
DEFAULT_MEMORY = 2 * 1024**3

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def memory_bound(environ: Mapping[str, str] | None = None) -> int:
    """The resident bytes a host may keep after a task (see the module);
    :class:`~statecore.errors.ConfigError` when ``STATECORE_HOST_MAX_MEMORY`` is not a size."""
    env = os.environ if environ is None else environ
    given = (env.get(MEMORY_ENV) or "").strip()
    if given:
        match = _SIZE.fullmatch(given)
        if match is None or float(match.group(1)) <= 0:
            raise ConfigError(
                f"warm state hosts: {MEMORY_ENV}={given!r} is not a memory size; give bytes or "
                "a number with k, m, g or t (for instance 2g), or leave it unset for "
                "spark.executor.pyspark.memory's share (else 2g)"
            )
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    spark_share = (env.get(PYSPARK_MEMORY_ENV) or "").strip()
    if spark_share.isdigit() and int(spark_share) > 0:
        return int(spark_share) * 1024**2
    return DEFAULT_MEMORY


def resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``), or its peak where there is
    no ``/proc``."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak_kib) * 1024


def over_bound(bound: int) -> str | None:
    """Why the host must exit when its resident memory is over ``bound``, else ``None``."""
    used = resident_bytes()
    if used <= bound:
        return None
    return (
        f"its resident memory {used / 1024**2:.0f} MiB is over the bound of "
        f"{bound / 1024**2:.0f} MiB ({MEMORY_ENV}); the subtask's next task restores in a new host"
    )
