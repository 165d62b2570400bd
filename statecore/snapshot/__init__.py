"""Snapshots as Delta Lake tables partitioned by key group (``deltalake`` is used only here)."""

from statecore.snapshot.files import SnapshotFile, write_key_group_file
from statecore.snapshot.table import SnapshotTable, key_group_schema

__all__ = ["SnapshotFile", "SnapshotTable", "key_group_schema", "write_key_group_file"]
