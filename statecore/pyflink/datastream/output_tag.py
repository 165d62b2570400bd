"""PyFlink's ``OutputTag`` (``pyflink.datastream.output_tag``): statecore's
:class:`~statecore.runtime.side_outputs.OutputTag` under PyFlink's spelling, so that
``ctx.output(tag, value)`` in a PyFlink-style function emits to statecore's side output of the
same name.

>>> tag = OutputTag("late-ones", None)
>>> tag.tag_id, tag.name
('late-ones', 'late-ones')
"""

from __future__ import annotations

from typing import Any

from statecore.runtime.side_outputs import OutputTag as _OutputTag

__all__ = ["OutputTag"]


class OutputTag(_OutputTag):
    """``OutputTag(tag_id, type_info=None)``; ``type_info`` is kept, not checked (statecore's
    side output table has its own schema)."""

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        object.__setattr__(self, "name", tag_id)
        object.__setattr__(self, "type_info", type_info)
        self.__post_init__()

    @property
    def tag_id(self) -> str:
        return self.name

    def get_type_info(self) -> Any:
        return self.type_info  # type: ignore[attr-defined]
