"""Pending output commits, recorded in the warehouse too: what rebuilds them after a lost catalog.

A checkpoint's pending output commits (:mod:`statecore.checkpoint.outputs`) live in the catalog.
If the catalog is lost after the checkpoint completed and before its output was committed, the
Delta logs of the state tables still show the checkpoint (``statecore catalog recover`` rebuilds
it from them), but nothing would say which output files it wrote: its rows would never reach the
output table. So the coordinator also writes them, once the catalog accepted them under the
writer's epoch and before any state table is committed, as one small JSON file:
``<warehouse>/_pending_outputs/<job>/<checkpoint_id>.<epoch>.json`` (written to a temporary name,
then moved). The epoch in the name fences it: a writer that was taken over never overwrites the
record of the writer that took over, and the record of a checkpoint's latest attempt is the one
with the highest epoch. A record is deleted once the checkpoint's output is committed (or its
files are discarded), so the folder holds only what is still pending.

The output files themselves are staged beside the records, in
``<warehouse>/_pending_outputs/<job>/<checkpoint_id>/<kind>/`` (:func:`staged_output_folder`):
outside every output table's folder, where no Delta tool lists them or VACUUMs them, until the
commit puts them into their table (:mod:`statecore.snapshot.output_staging`).

:func:`pending_records` reads them back for :func:`~statecore.checkpoint.recover.recover_catalog`,
which records each again as the pending output commits of the checkpoint it rebuilds; rolling
forward then commits them exactly once (the output's application transaction makes a commit that
was made already a no-op).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict

import pyarrow.fs as pafs

from statecore.catalog import PendingOutput
from statecore.snapshot.files import table_filesystem

__all__ = [
    "FOLDER",
    "delete_pending_records",
    "delete_staged_checkpoint",
    "pending_records",
    "pending_records_folder",
    "staged_output_folder",
    "unrecorded_staging",
    "write_pending_record",
]

FOLDER = "_pending_outputs"
_FIELDS = ("uri", "kind", "app_id", "table_schema", "files")


def pending_records_folder(warehouse: str, job: str) -> str:
    """Where the records of ``job`` are: ``<warehouse>/_pending_outputs/<job>``."""
    return f"{warehouse.rstrip('/')}/{FOLDER}/{job}"


def staged_output_folder(warehouse: str, job: str, checkpoint_id: int, kind: str) -> str:
    """Where the tasks of ``checkpoint_id`` write their ``kind`` files (``output`` or
    ``late-data``) until the commit: ``<warehouse>/_pending_outputs/<job>/<checkpoint_id>/<kind>``.

    >>> staged_output_folder("/wh/", "clicks", 7, "output")
    '/wh/_pending_outputs/clicks/7/output'
    """
    return f"{pending_records_folder(warehouse, job)}/{checkpoint_id}/{kind}"


def _folder(warehouse: str, job: str) -> tuple[pafs.FileSystem, str]:
    return table_filesystem(pending_records_folder(warehouse, job))


def write_pending_record(
    warehouse: str,
    job: str,
    checkpoint_id: int,
    outputs: Sequence[PendingOutput],
    *,
    epoch: int | None,
) -> None:
    """Write ``outputs`` (the pending output commits of ``checkpoint_id``, recorded in the
    catalog under ``epoch``) as the checkpoint's record in the warehouse; nothing when there
    are none."""
    if not outputs:
        return
    fs, root = _folder(warehouse, job)
    fs.create_dir(root, recursive=True)
    path = f"{root}/{checkpoint_id}.{epoch or 0}.json"
    body = {
        "job": job,
        "checkpoint_id": checkpoint_id,
        "epoch": epoch,
        "outputs": [{name: asdict(o)[name] for name in _FIELDS} for o in outputs],
    }
    temporary = f"{path}.{os.getpid()}.tmp"
    with fs.open_output_stream(temporary) as out:
        out.write(json.dumps(body).encode())
    fs.move(temporary, path)


def _records(fs: pafs.FileSystem, root: str) -> list[tuple[int, int, str]]:
    """``(checkpoint_id, epoch, path)`` of each record below ``root``."""
    found = []
    for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        parts = info.base_name.split(".")
        if len(parts) == 3 and parts[2] == "json" and parts[0].isdigit() and parts[1].isdigit():
            found.append((int(parts[0]), int(parts[1]), info.path))
    return sorted(found)


def pending_records(warehouse: str, job: str) -> dict[int, list[PendingOutput]]:
    """The pending output commits the warehouse records for ``job``, by checkpoint id: of each
    checkpoint, those of its latest attempt (the highest epoch)."""
    fs, root = _folder(warehouse, job)
    latest: dict[int, tuple[int, str]] = {}
    for checkpoint_id, epoch, path in _records(fs, root):
        latest[checkpoint_id] = (epoch, path)
    out = {}
    for checkpoint_id, (epoch, path) in latest.items():
        with fs.open_input_stream(path) as f:
            body = json.loads(f.read())
        out[checkpoint_id] = [
            PendingOutput(
                job=job,
                checkpoint_id=checkpoint_id,
                uri=o["uri"],
                kind=o["kind"],
                app_id=o["app_id"],
                table_schema=o["table_schema"],
                files=tuple(o["files"]),
                epoch=epoch,
            )
            for o in body["outputs"]
        ]
    return out


def unrecorded_staging(warehouse: str, job: str) -> list[int]:
    """The checkpoints of ``job`` with a staging folder but no record in the warehouse."""
    fs, root = _folder(warehouse, job)
    recorded = {c for c, _, _ in _records(fs, root)}
    return sorted(
        int(info.base_name)
        for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        if info.type == pafs.FileType.Directory
        and info.base_name.isdigit()
        and int(info.base_name) not in recorded
    )


def delete_staged_checkpoint(warehouse: str, job: str, checkpoint_id: int) -> None:
    """Delete the staging folder of ``checkpoint_id`` with every file in it: files of an
    attempt that was killed before it recorded them (nothing will ever commit them)."""
    fs, root = _folder(warehouse, job)
    staging = f"{root}/{checkpoint_id}"
    if fs.get_file_info(staging).type == pafs.FileType.Directory:
        fs.delete_dir(staging)


def delete_pending_records(warehouse: str, job: str, checkpoint_id: int) -> None:
    """Delete every record of ``checkpoint_id``: its output was committed or discarded (and
    its staging folder, once no staged file is left in it)."""
    fs, root = _folder(warehouse, job)
    staging = f"{root}/{checkpoint_id}"
    left = fs.get_file_info(pafs.FileSelector(staging, allow_not_found=True, recursive=True))
    if fs.get_file_info(staging).type == pafs.FileType.Directory and not any(
        info.type == pafs.FileType.File for info in left
    ):
        try:
            fs.delete_dir(staging)
        except FileNotFoundError:
            pass  # removed meanwhile
    for found_id, _, path in _records(fs, root):
        if found_id == checkpoint_id:
            try:
                fs.delete_file(path)
            except FileNotFoundError:
                pass
