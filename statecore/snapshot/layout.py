"""Where each table of a job lives in the warehouse.

>>> state_table_uri("/wh", "clicks", "main", "keyed", "total")
'/wh/clicks/main/keyed/total'
>>> state_table_uri("/wh/", "clicks", "main", "timers", "timers")
'/wh/clicks/main/timers'
"""

from __future__ import annotations

__all__ = ["TIMERS", "state_table_uri"]

TIMERS = "timers"
"""The name (and table kind) of an operator's timers table."""


def state_table_uri(warehouse: str, job: str, operator: str, table_kind: str, state: str) -> str:
    """``<warehouse>/<job>/<operator>/keyed|operator/<state>``, or ``.../timers``."""
    base = f"{warehouse.rstrip('/')}/{job}/{operator}"
    return f"{base}/{TIMERS}" if table_kind == TIMERS else f"{base}/{table_kind}/{state}"
