"""A stream's source offsets: those of its micro-batches, from Spark's offset log, and those a
savepoint keeps, where a new query continues.

Spark writes a micro-batch's offsets to ``<checkpoint location>/offsets/<batch id>`` before it
runs it: a version line, the batch's metadata, then one offset per source in the plan's order
(JSON; a Kafka source's is ``{topic: {partition: offset}}``, a file source's
``{"logOffset": n}``). :func:`batch_offsets` reads them; a micro-batch's checkpoint records them
as its input identity (:mod:`statecore.spark.stream`), and a savepoint taken from that
checkpoint keeps the identity (``source_input`` in its metadata). :func:`savepoint_offsets`
gives the end offsets a savepoint keeps as the Kafka source's ``startingOffsets``: a new query
started from the savepoint (``keyed_stream(..., restore_from=...)``) reads every record after
the savepoint's state, once.
"""

from __future__ import annotations

import json
from typing import Any

from statecore.checkpoint.points import RestorePoint, load_savepoint
from statecore.errors import ConfigError
from statecore.snapshot.files import table_filesystem

__all__ = ["batch_offsets", "data_moved", "savepoint_offsets"]

_GIVEN = "given:"
"""How a checkpoint's input identity starts when the caller gave it (a stream's micro-batch)."""


def data_moved(checkpoint_location: str, batch_id: int) -> bool | None:
    """Whether the data sources' end offsets of micro-batch ``batch_id`` differ from those of
    the micro-batch before (the ``rate`` ticks are the last source), from Spark's offset log;
    ``None`` when the log cannot tell."""
    before = _source_offsets(checkpoint_location, batch_id - 1)
    now = _source_offsets(checkpoint_location, batch_id)
    if before is None or now is None or len(before) != len(now) or len(now) < 2:
        return None
    return before[:-1] != now[:-1]


def batch_offsets(
    checkpoint_location: str, batch_id: int, *, ticks: bool = False
) -> dict[str, list[Any] | None] | None:
    """The data sources' offsets of micro-batch ``batch_id`` from Spark's offset log under
    ``checkpoint_location``: ``{"start": [...], "end": [...]}``, one offset per source in the
    plan's order (parsed JSON, ``None`` for a source without one), ``start`` being the end of
    the micro-batch before (``None`` for the first); without the ``rate`` ticks, the last source,
    when ``ticks``. ``None`` when the log has no entry for the micro-batch."""
    end = _source_offsets(checkpoint_location, batch_id)
    if end is None:
        return None
    start = _source_offsets(checkpoint_location, batch_id - 1) if batch_id > 0 else None
    if ticks:
        end = end[:-1]
        start = None if start is None else start[:-1]
    return {"start": start, "end": end}


def _source_offsets(checkpoint_location: str, batch_id: int) -> list[Any] | None:
    """The sources' offsets in ``offsets/<batch_id>`` (a version line, the batch's metadata,
    then one offset per source in the plan's order, ``-`` for none); ``None`` when there is no
    such entry or it is not in that form."""
    if batch_id < 0:
        return None
    fs, root = table_filesystem(checkpoint_location.rstrip("/"))
    try:
        with fs.open_input_stream(f"{root}/offsets/{batch_id}") as stream:
            lines = stream.read().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    return [_offset(line) for line in lines[2:]]


def _offset(text: str) -> Any:
    if text == "-":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def savepoint_offsets(savepoint: str | RestorePoint, *, source: int | None = None) -> str:
    """The Kafka source's ``startingOffsets`` (JSON, ``{"clicks": {"0": 120, "1": 97}}``) that
    continue from ``savepoint`` (its folder, or the restore point ``take_savepoint`` returns):
    the end offsets of the micro-batch whose checkpoint it was taken from.

    ``source`` is the index of the Kafka source among the stream's sources (in the plan's
    order, as in the offsets the checkpoint recorded), needed when there are several.
    :class:`~statecore.errors.ConfigError`, naming the savepoint, when it keeps no stream
    offsets (taken from a batch checkpoint or a maintenance checkpoint on one, or written by a
    statecore before savepoints kept them), when the stream had several sources and ``source``
    is not given, or when the source is not Kafka.
    """
    point = savepoint if isinstance(savepoint, RestorePoint) else load_savepoint(savepoint)
    identity = point.input_identity
    ends = _end_offsets(identity)
    taken = (
        "from an unknown checkpoint"
        if point.checkpoint_id is None
        else f"from checkpoint {point.checkpoint_id}"
    )
    if ends is None:
        raise ConfigError(
            f"{point.label} was taken {taken}, which recorded no stream offsets (its input: "
            f"{identity or 'not recorded'}): startingOffsets come from a savepoint of a "
            "checkpoint that a micro-batch of keyed_stream completed"
        )
    if source is None:
        if len(ends) != 1:
            sources = "; ".join(f"source={i}: {_describe(o)}" for i, o in enumerate(ends))
            raise ConfigError(
                f"{point.label}: the stream it was taken from read {len(ends)} sources; "
                f"choose the Kafka one by its index in the plan's order ({sources})"
            )
        source = 0
    if not 0 <= source < len(ends):
        raise ConfigError(
            f"{point.label}: source={source}, but the stream it was taken from read "
            f"{len(ends)} source(s) (0 to {len(ends) - 1})"
        )
    offset = ends[source]
    if not _is_kafka(offset):
        raise ConfigError(
            f"{point.label}: source {source} of the stream it was taken from is not a Kafka "
            f"source: its offset is {offset!r} (a file source's is {{'logOffset': n}}); "
            "startingOffsets is an option of Spark's Kafka source"
        )
    return json.dumps(offset, sort_keys=True)


def _end_offsets(identity: str | None) -> list[Any] | None:
    """The sources' end offsets in a micro-batch's input identity
    (``{"batch_id": n, "offsets": {"start": [...], "end": [...]}}``); ``None`` for another."""
    if identity is None or not identity.startswith(_GIVEN):
        return None
    try:
        data = json.loads(identity.removeprefix(_GIVEN))
    except ValueError:
        return None
    offsets = data.get("offsets") if isinstance(data, dict) else None
    ends = offsets.get("end") if isinstance(offsets, dict) else None
    return ends if isinstance(ends, list) and ends else None


def _is_kafka(offset: Any) -> bool:
    """``{topic: {partition: offset}}``: the offset of a Kafka source."""
    return (
        isinstance(offset, dict)
        and bool(offset)
        and all(
            isinstance(partitions, dict)
            and all(p.isdigit() and type(o) is int for p, o in partitions.items())
            for partitions in offset.values()
        )
    )


def _describe(offset: Any) -> str:
    if _is_kafka(offset):
        return f"Kafka, topic(s) {', '.join(sorted(offset))}"
    return f"not Kafka, offset {offset!r}"
