"""The identity of a run's input, recorded with its checkpoint so that a replay can be checked.

A checkpoint id stands for one input: a replay of a completed id is a no-op only if it carries
the same input. The identity is the caller's ``input_fingerprint`` when given (a string, or a
mapping such as a streaming micro-batch's id and source offsets, as canonical JSON), else, when
the DataFrame reads files, a digest of ``df.inputFiles()`` with each file's size and modification
time (from the plan and the file system: no Spark job), else (a DataFrame built in memory, a JDBC
read, ``spark.range``) a digest of its rows: the schema, the row count and the sum of every row's
``xxhash64`` (order-free), from one Spark job over the input. Input therefore always has an
identity, and a replay with other rows is refused instead of silently doing nothing. A plan
whose rows change from one evaluation to the next (``rand()`` without a seed, a source that
moves) gets a new identity each time: give it ``input_fingerprint=``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from statecore.errors import ConfigError

__all__ = ["input_identity"]

log = logging.getLogger(__name__)


def input_identity(df: DataFrame, fingerprint: str | Mapping[str, Any] | None) -> str | None:
    """The identity of ``df`` as the run's input (see the module docstring)."""
    if fingerprint is not None:
        if isinstance(fingerprint, str):
            return f"given:{fingerprint}"
        try:
            return "given:" + json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"input_fingerprint {fingerprint!r} is neither a string nor JSON: {exc}"
            ) from exc
    try:
        paths = sorted(df.inputFiles())
    except Exception as exc:  # a source without files (or that cannot list them)
        log.debug("no input files: %s", exc)
        paths = []
    if not paths:
        return _rows_identity(df)
    digest = hashlib.sha256()
    for path, info in zip(paths, _file_infos(paths), strict=True):
        digest.update(f"{path}\t{info}\n".encode())
    return f"files:{len(paths)}:{digest.hexdigest()[:32]}"


def _file_infos(paths: list[str]) -> list[str]:
    """``size:mtime_ns`` of each path (``?`` when the file system cannot tell)."""
    try:
        filesystem, _ = pafs.FileSystem.from_uri(paths[0])
        infos = filesystem.get_file_info([pafs.FileSystem.from_uri(p)[1] for p in paths])
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        log.debug("input files cannot be listed: %s", exc)
        return ["?"] * len(paths)
    return [f"{i.size}:{i.mtime_ns}" for i in infos]


def _rows_identity(df: DataFrame) -> str | None:
    """``rows:<count>:<digest>`` of a DataFrame without files: its schema, row count and the
    sum of its rows' ``xxhash64`` (one Spark job; the sum does not depend on row order or
    partitioning)."""
    columns = [_hashable(field) for field in df.schema.fields]
    row_hash = F.xxhash64(*columns) if columns else F.lit(0)
    try:
        row = df.select(
            F.count(F.lit(1)), F.coalesce(F.sum(row_hash.cast("decimal(38,0)")), F.lit(0))
        ).first()
    except AnalysisException as exc:  # a column type Spark cannot hash
        log.warning(
            "the input's rows cannot be hashed (%s): a replay of this checkpoint id is not "
            "checked; give input_fingerprint= to check it",
            exc,
        )
        return None
    count, total = (0, 0) if row is None else (row[0], row[1])
    digest = hashlib.sha256(f"{df.schema.simpleString()}\t{count}\t{total}".encode())
    return f"rows:{count}:{digest.hexdigest()[:32]}"


def _hashable(field: T.StructField) -> Any:
    """The column as ``xxhash64`` takes it: a column holding maps (which Spark does not hash)
    as its JSON text."""
    column = F.col(f"`{field.name.replace('`', '``')}`")
    return F.to_json(F.struct(column)) if _has_map(field.dataType) else column


def _has_map(data_type: T.DataType) -> bool:
    if isinstance(data_type, T.MapType):
        return True
    if isinstance(data_type, T.ArrayType):
        return _has_map(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    return False
