"""State time-to-live: configuration, the injectable clock, and the decorator layer."""

from statecore.ttl.config import (
    CleanupStrategy,
    StateTtlConfig,
    StateVisibility,
    UpdateType,
)
from statecore.ttl.time import ManualTimeProvider, TtlTimeProvider

__all__ = [
    "CleanupStrategy",
    "StateTtlConfig",
    "StateVisibility",
    "UpdateType",
    "TtlTimeProvider",
    "ManualTimeProvider",
]
