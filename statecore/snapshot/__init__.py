"""Snapshots as Delta Lake tables partitioned by key group (``deltalake`` is used only here)."""

from statecore.snapshot.files import SnapshotFile, write_key_group_file, write_key_group_files
from statecore.snapshot.layout import TIMERS, state_table_uri
from statecore.snapshot.table import Fence, SnapshotTable, TableFile, key_group_schema

__all__ = [
    "TIMERS",
    "Fence",
    "SnapshotFile",
    "SnapshotTable",
    "TableFile",
    "key_group_schema",
    "state_table_uri",
    "write_key_group_file",
    "write_key_group_files",
]
