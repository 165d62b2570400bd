"""The identity of a run's input, recorded with its checkpoint so that a replay can be checked.

A checkpoint id stands for one input: a replay of a completed id is a no-op only if it carries
the same input. The identity is the caller's ``input_fingerprint`` when given (a string, or a
mapping such as a streaming micro-batch's id and source offsets, as canonical JSON), else, when
the DataFrame reads files, a digest of ``df.inputFiles()`` with each file's size and modification
time (from the plan and the file system: no Spark job), else none (then nothing is checked).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs
from pyspark.sql import DataFrame

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
        return None
    if not paths:
        return None
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
