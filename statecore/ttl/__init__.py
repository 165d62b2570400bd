"""State time-to-live: configuration, the injectable clock, and the decorator layer.

``config`` (``StateTtlConfig``), ``time`` (``TtlTimeProvider``), ``storage`` (how a TTL value is
stored and snapshotted: ``{"value", "ttl_timestamp"}``) and ``states`` (the decorators).
"""

from statecore.ttl.config import (
    CleanupStrategy,
    StateTtlConfig,
    StateVisibility,
    UpdateType,
)
from statecore.ttl.time import ManualTimeProvider, SystemTimeProvider, TtlTimeProvider

__all__ = [
    "CleanupStrategy",
    "StateTtlConfig",
    "StateVisibility",
    "UpdateType",
    "TtlTimeProvider",
    "SystemTimeProvider",
    "ManualTimeProvider",
]
