"""Windows over keyed state, as Flink's ``WindowOperator`` is composed (also ``statecore.windows``).

- :mod:`.windows`: the window values (``TimeWindow``, ``GlobalWindow``), their namespaces.
- :mod:`.assigners`: tumbling, sliding, session (merging) and global windows.
- :mod:`.triggers`: event-time, processing-time, count, purging and custom triggers.
- :mod:`.evictors`: count, time and custom evictors.
- :mod:`.functions`: ``ProcessWindowFunction``, ``WindowFunction`` and how a window keeps its
  contents (list, reducing or aggregating state).
- :mod:`.merging`: the merging windows of a key (session windows).
- :mod:`.operator`: the ``WindowOperator``, a ``KeyedProcessFunction``.
- :mod:`.builder`: :func:`window`, the way to build one.
"""

from statecore.runtime.windows.assigners import (
    DynamicSessionWindows,
    GlobalWindows,
    MergingWindowAssigner,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WindowAssigner,
)
from statecore.runtime.windows.builder import Windowing, window
from statecore.runtime.windows.evictors import CountEvictor, Evictor, TimeEvictor, TimestampedValue
from statecore.runtime.windows.functions import (
    ProcessWindowFunction,
    WindowFunction,
    WindowProcessContext,
)
from statecore.runtime.windows.operator import WindowOperator
from statecore.runtime.windows.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    OnMergeContext,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerContext,
    TriggerResult,
)
from statecore.runtime.windows.windows import GlobalWindow, TimeWindow, Window, window_of

__all__ = [
    "window",
    "Windowing",
    "WindowOperator",
    "Window",
    "TimeWindow",
    "GlobalWindow",
    "window_of",
    "WindowAssigner",
    "MergingWindowAssigner",
    "TumblingWindows",
    "SlidingWindows",
    "SessionWindows",
    "DynamicSessionWindows",
    "GlobalWindows",
    "Trigger",
    "TriggerResult",
    "TriggerContext",
    "OnMergeContext",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "NeverTrigger",
    "Evictor",
    "CountEvictor",
    "TimeEvictor",
    "TimestampedValue",
    "ProcessWindowFunction",
    "WindowFunction",
    "WindowProcessContext",
]
