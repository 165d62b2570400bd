"""``StateTtlConfig``: how long a state entry lives, what refreshes it, when it is cleaned up.

>>> from datetime import timedelta
>>> StateTtlConfig(ttl=timedelta(days=7)).update_type
<UpdateType.ON_CREATE_AND_WRITE: 'on_create_and_write'>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from statecore.errors import ConfigError, PyFlinkSpelling

__all__ = ["UpdateType", "StateVisibility", "CleanupStrategy", "StateTtlConfig"]


class UpdateType(enum.Enum):
    """What refreshes an entry's last-access timestamp."""

    ON_CREATE_AND_WRITE = "on_create_and_write"
    ON_READ_AND_WRITE = "on_read_and_write"


class StateVisibility(enum.Enum):
    """Whether an expired entry that is still stored may be returned."""

    NEVER_RETURN_EXPIRED = "never_return_expired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "return_expired_if_not_cleaned_up"


class CleanupStrategy(enum.Enum):
    """When expired entries are removed (reads always hide them under NEVER_RETURN_EXPIRED)."""

    ON_READ = "on_read"
    FULL_SNAPSHOT = "full_snapshot"
    INCREMENTAL = "incremental"


@dataclass(frozen=True, kw_only=True)
class StateTtlConfig:
    ttl: timedelta
    update_type: UpdateType = UpdateType.ON_CREATE_AND_WRITE
    visibility: StateVisibility = StateVisibility.NEVER_RETURN_EXPIRED
    cleanup: CleanupStrategy = CleanupStrategy.ON_READ
    cleanup_size: int = 5
    run_cleanup_for_every_record: bool = False

    new_builder = PyFlinkSpelling(
        "StateTtlConfig(ttl=timedelta(seconds=n), update_type=UpdateType.ON_READ_AND_WRITE, "
        "visibility=StateVisibility.NEVER_RETURN_EXPIRED, cleanup=CleanupStrategy.FULL_SNAPSHOT)"
        " (keyword arguments, no builder; the enums are statecore.ttl's)"
    )

    def __post_init__(self) -> None:
        if not isinstance(self.ttl, timedelta) or self.ttl <= timedelta(0):
            raise ConfigError(f"StateTtlConfig.ttl must be a positive timedelta, got {self.ttl!r}")
        if self.cleanup_size <= 0:
            raise ConfigError(f"StateTtlConfig.cleanup_size must be positive: {self.cleanup_size}")

    @property
    def ttl_ms(self) -> int:
        return int(self.ttl.total_seconds() * 1000)

    def describe(self) -> dict[str, Any]:
        return {
            "ttl_ms": self.ttl_ms,
            "update_type": self.update_type.value,
            "visibility": self.visibility.value,
            "cleanup": self.cleanup.value,
        }
