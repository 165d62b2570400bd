"""SQL over snapshots (DuckDB only here): views per job and state, checksums and diffs.

- :mod:`~statecore.query.sql`: the views of a checkpoint or savepoint, and ``run_sql``
  (re-exported here).
- :mod:`~statecore.query.diff`: per-table checksums, keys that differ between two points.
- :mod:`~statecore.query.lookup`: one key's value at a checkpoint or savepoint (its key group
  only).
- :mod:`~statecore.query.apply`: ``UPDATE``/``DELETE`` statements over a copy of the state.

``statecore sql``, ``diff`` and ``state apply`` run in DuckDB's sandbox
(:func:`~statecore.query.sql.sandbox`): once the views exist, the connection reads only the
folders of their tables, and its configuration is locked.
"""

from statecore.query.lookup import LookupResult, lookup
from statecore.query.sql import (
    StateViews,
    connect,
    delta_scan,
    ident,
    open_point_views,
    open_views,
    run_sql,
    view_names,
)

__all__ = [
    "LookupResult",
    "StateViews",
    "connect",
    "delta_scan",
    "ident",
    "lookup",
    "open_point_views",
    "open_views",
    "run_sql",
    "view_names",
]
