"""PyFlink's ``pyflink.common`` names: ``Types`` (also in ``statecore.pyflink.common.typeinfo``),
``Time`` and ``Duration`` (``.common.time``), ``Row`` (``.common.types``),
``WatermarkStrategy`` (``.common.watermark_strategy``), ``SimpleStringSchema`` and ``Encoder``
(``.common.serialization``)."""

from statecore.pyflink.common.serialization import Encoder, SimpleStringSchema
from statecore.pyflink.common.time import Duration, Time
from statecore.pyflink.common.typeinfo import TypeInformation, Types
from statecore.pyflink.common.types import Row, RowKind
from statecore.pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = [
    "Duration",
    "Encoder",
    "Row",
    "RowKind",
    "SimpleStringSchema",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "WatermarkStrategy",
]
