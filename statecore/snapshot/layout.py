"""Where each table of a job lives in the warehouse.

>>> state_table_uri("/wh", "clicks", "main", "keyed", "total")
'/wh/clicks/main/keyed/total'
>>> state_table_uri("/wh/", "clicks", "main", "timers", "timers")
'/wh/clicks/main/timers'
"""

from __future__ import annotations

from statecore.config import check_name, check_state_name

__all__ = ["TIMERS", "state_table_uri"]

TIMERS = "timers"
"""The name (and table kind) of an operator's timers table."""


def state_table_uri(warehouse: str, job: str, operator: str, table_kind: str, state: str) -> str:
    """``<warehouse>/<job>/<operator>/keyed|operator/<state>``, or ``.../timers``; a name that
    is not one safe path segment is a :class:`~statecore.errors.ConfigError`."""
    check_name("job", job)
    check_name("operator", operator)
    if table_kind != TIMERS:
        check_state_name(state, where=f" of operator {operator!r} in job {job!r}")
    base = f"{warehouse.rstrip('/')}/{job}/{operator}"
    return f"{base}/{TIMERS}" if table_kind == TIMERS else f"{base}/{table_kind}/{state}"
