"""Registers the statecore page (:class:`statecore_airflow.plugin.StatecorePlugin`) from the
plugins folder, unless the installed ``statecore`` distribution registers it through its
``airflow.plugins`` entry point (then this file defines no plugin, so Airflow loads it once)."""

from __future__ import annotations

from statecore_airflow.plugin import StatecorePlugin, registered_by_entry_point

__all__ = ["StatecorePlugin"]

if registered_by_entry_point():
    del StatecorePlugin
    __all__ = []
