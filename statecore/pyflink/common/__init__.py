"""PyFlink's ``pyflink.common`` names that keyed functions use: ``Types`` (also in
``statecore.pyflink.common.typeinfo``), ``Time`` and ``Duration`` (also in
``statecore.pyflink.common.time``)."""

from statecore.pyflink.common.time import Duration, Time
from statecore.pyflink.common.typeinfo import TypeInformation, Types

__all__ = ["Duration", "Time", "TypeInformation", "Types"]
