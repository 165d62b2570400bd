"""Side outputs: further outputs of a function besides its main one (Flink's ``OutputTag``).

A function emits a value to a side output with ``ctx.output(tag, value)``, in
``process_element`` as in ``on_timer``; the runtime gathers them per tag
(:class:`SideOutputs`) beside the main output. Where they go is the caller's: the test harness
keeps them (``harness.side_output(tag)``), a Spark run writes each tag's rows to its own Delta
table, committed with the checkpoint as the main output is
(``keyed_process(..., side_outputs=...)``).

>>> alerts = OutputTag("alerts")
>>> outputs = SideOutputs()
>>> outputs.emit(alerts, ("sensor-1", 99))
>>> outputs.drain()
{'alerts': [('sensor-1', 99)]}
>>> outputs.drain()
{}
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from statecore.config import check_name
from statecore.errors import ConfigError

__all__ = ["OutputTag", "SideOutputs"]


@dataclass(frozen=True)
class OutputTag:
    """Names a side output; two tags with the same name are the same side output. The name is
    1 to 200 letters, digits, ``.``, ``_`` or ``-`` (it names a staging folder)."""

    name: str

    def __post_init__(self) -> None:
        check_name("side output", self.name)

    @classmethod
    def of(cls, tag: OutputTag | str) -> OutputTag:
        """``tag``, or the tag named ``tag``."""
        return tag if isinstance(tag, OutputTag) else cls(tag)


class SideOutputs:
    """The values emitted per side output since the last :meth:`drain`. With ``accepted``
    (the names a run has somewhere to put), a value for another tag is a
    :class:`~statecore.errors.ConfigError` at the call: the run fails before anything of it is
    committed, rather than losing the value."""

    __slots__ = ("_values", "accepted", "where")

    def __init__(self, accepted: Collection[str] | None = None, *, where: str = "") -> None:
        self._values: dict[str, list[Any]] = {}
        self.accepted = accepted
        self.where = where
        """Who emits (``job 'x', operator 'y'``), for the error's message."""

    def emit(self, tag: OutputTag, value: Any) -> None:
        if not isinstance(tag, OutputTag):
            raise ConfigError(
                f"ctx.output({tag!r}, ...): the first argument is an OutputTag "
                f"(statecore.OutputTag('name')), not a {type(tag).__name__}"
            )
        name = tag.name
        values = self._values.get(name)
        if values is None:
            accepted = self.accepted
            if accepted is not None and name not in accepted:
                where = f"{self.where}: " if self.where else ""
                raise ConfigError(
                    f"{where}the function emitted to side output {name!r}, which the run has "
                    f"no table for (configured: {sorted(accepted)}); give it one with "
                    f"side_outputs={{{name!r}: SideOutput(table=..., schema=...)}}, or "
                    f"side_outputs={{{name!r}: None}} to drop its values"
                )
            values = self._values[name] = []
        values.append(value)

    def drain(self) -> dict[str, list[Any]]:
        """The values gathered since the last call, per tag name (in emission order)."""
        values, self._values = self._values, {}
        return values
