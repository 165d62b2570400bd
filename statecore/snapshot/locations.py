"""Table locations, one spelling per table: the key of every ownership check.

One table can be written many ways: through a symlinked folder, relative or as ``file://``,
as ``s3://``, ``s3a://`` (Hadoop's spelling, which Spark users copy) or ``s3n://``, with or
without a trailing ``/``. :func:`canonical_location` maps them all to one: a local path to its
real, absolute path (symlinks resolved, also for a folder that does not exist yet: its
nearest existing parent is resolved), S3 to ``s3://``, no trailing ``/``. The catalog binds
output tables by it, and it is the location an owner is recorded for.

A home is the warehouse its jobs write (:func:`home_identity`, a short hash of the warehouse's
canonical location: it survives a catalog rebuilt from the warehouse). The owner of an output
table, written into the table as the property :data:`OWNER_PROPERTY`, and the application id
its commits record the checkpoint under, are both :func:`output_app_id`: the home, the job,
the operator and the kind, so two homes that run a job of the same name never share a table
unnoticed, nor skip each other's checkpoints as "already in the table".

>>> canonical_location("s3a://bucket/out/")
's3://bucket/out'
>>> canonical_location("S3N://bucket/out")
's3://bucket/out'
>>> output_app_id("s3://bucket/warehouse", "orders", "main")
'statecore:ca96ee299ca0:orders/main'
"""

from __future__ import annotations

import hashlib
import os
import re

__all__ = [
    "OWNER_PROPERTY",
    "OWNER_WAREHOUSE_PROPERTY",
    "canonical_location",
    "home_identity",
    "legacy_app_id",
    "output_app_id",
    "same_writer",
]

OWNER_PROPERTY = "statecore.owner"
"""The Delta table property naming the one writer of an output table (an :func:`output_app_id`)."""

OWNER_WAREHOUSE_PROPERTY = "statecore.owner.warehouse"
"""The Delta table property naming the warehouse of the owner's home, for messages."""

_S3 = re.compile(r"^s3[an]?://", re.IGNORECASE)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_APP_ID = re.compile(r"^statecore:(?:(?P<home>[0-9a-f]{12}):)?(?P<writer>.+)$")


def canonical_location(uri: str) -> str:
    """The one spelling of the table (or folder) at ``uri``: a local path real and absolute,
    S3 as ``s3://``, any other scheme lower-cased, no trailing ``/``."""
    if uri.startswith("file://"):
        uri = uri.removeprefix("file://")
    if _S3.match(uri):
        return "s3://" + _S3.sub("", uri).rstrip("/")
    scheme = _SCHEME.match(uri)
    if scheme is not None:
        return scheme.group(1).lower() + uri[scheme.end(1) :].rstrip("/")
    return os.path.realpath(os.path.abspath(os.path.expanduser(uri)))


def home_identity(warehouse: str) -> str:
    """The stable id of the home whose warehouse is ``warehouse`` (12 hex digits)."""
    location = canonical_location(warehouse).encode()
    return hashlib.sha256(location).hexdigest()[:12]


def output_app_id(warehouse: str, job: str, operator: str, kind: str = "output") -> str:
    """The owner of, and the application id of the commits to, a job's output (``kind``
    ``output``) or late-data (``late-data``) table."""
    suffix = "/late" if kind == "late-data" else ""
    return f"statecore:{home_identity(warehouse)}:{job}/{operator}{suffix}"


def legacy_app_id(app_id: str) -> str | None:
    """The application id an older statecore gave the same writer (without its home), or
    ``None`` when ``app_id`` is one already."""
    found = _APP_ID.match(app_id)
    if found is None or found.group("home") is None:
        return None
    return f"statecore:{found.group('writer')}"


def same_writer(owner: str, app_id: str) -> bool:
    """Whether the table owner ``owner`` is the writer of ``app_id``: the same id, or
    ``app_id`` is an older statecore's id of that writer (a commit it left pending)."""
    if owner == app_id:
        return True
    return legacy_app_id(app_id) is None and legacy_app_id(owner) == app_id
