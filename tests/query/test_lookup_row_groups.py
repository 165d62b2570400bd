"""Point lookups read the row group that can hold the key, not the key group's whole file.

A checkpoint of one key group (max parallelism 1) written by a real task of each backend: a
file of a few MB in many row groups, sorted by key. Bytes are counted twice: by the lookup
(``bytes_read``) and by the operating system (``rchar`` of ``/proc/self/io``: every byte this
process read from any file), so a read the lookup does not count still shows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statecore.backends import BackendParameters, backend_names, create_backend
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.points import RestorePoint, resolve_point
from statecore.config import StatecoreConfig
from statecore.descriptors import MapStateDescriptor, ValueStateDescriptor
from statecore.errors import CorruptSnapshotError
from statecore.keygroups import KeyGroupRange
from statecore.query.lookup import lookup_at
from statecore.runtime import KeyedProcessFunction
from statecore.runtime.task import KeyedOperatorTask, probe_states
from statecore.snapshot import files as snapshot_files
from statecore.snapshot.row_groups import WHOLE_FILE_BYTES
from statecore.snapshot.table import SnapshotTable
from statecore.types import TypeInfo

JOB = "big"
KEYS = 30_000
TOTAL = ValueStateDescriptor("total", str)
ITEMS = MapStateDescriptor("items", str, int)


class _Big(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(TOTAL)
        self.items = ctx.get_map_state(ITEMS)

    def process_element(self, value: Any, ctx: Any) -> list[Any]:
        return []


def _value(i: int) -> str:
    """A value of 200 characters, hardly compressible (the key's index in it)."""
    return f"{i:08d}" + os.urandom(96).hex()


def _checkpoint(home: Path, backend_name: str) -> StatecoreConfig:
    return write_big_checkpoint(StatecoreConfig.resolve(home=str(home), env={}), backend_name)


def write_big_checkpoint(config: StatecoreConfig, backend_name: str) -> StatecoreConfig:
    """Checkpoint 1 of job ``big``: ``KEYS`` keys of a ValueState (keys written in an order
    that is not theirs) and a MapState of three entries for every tenth key, in one key group."""
    backend = create_backend(
        BackendParameters.of(backend_name),
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 0),
        max_parallelism=1,
        restore_source=None,
    )
    total: Any = backend.get_partitioned_state(TOTAL)
    items: Any = backend.get_partitioned_state(ITEMS)
    for n in range(KEYS):
        i = n * 7919 % KEYS  # not in key order
        backend.set_current_key(f"user-{i}", 0)
        total.update(_value(i))
        if i % 10 == 0:
            items.put_all({"a": i, "b": i + 1, "c": i + 2})
    try:
        with Catalog.connect(config.catalog_url) as catalog:
            coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator="main")
            planned = coordinator.plan(1, parallelism=1, max_parallelism=1, default_parallelism=1)
            planned = coordinator.check_compatible(
                planned,
                probe_states(
                    _Big(),
                    TypeInfo.of(str),
                    job=JOB,
                    operator="main",
                    parallelism=1,
                    max_parallelism=1,
                ),
            )
            task = KeyedOperatorTask(
                _Big(), backend, job=JOB, operator="main", subtask_index=0, parallelism=1
            )
            task.open()
            uris = {name: coordinator.table_uri(name) for name in ("total", "items")}
            coordinator.commit(planned, task.snapshot(uris, checkpoint_id=1))
    finally:
        backend.close()
    return config


def _point(config: StatecoreConfig) -> RestorePoint:
    with Catalog.connect(config.catalog_url) as catalog:
        return resolve_point(catalog, JOB, None)


def _state_file(point: RestorePoint, state: str) -> tuple[int, pq.FileMetaData]:
    """The one file of ``state`` at ``point``: its size and footer."""
    [table] = [t for t in point.tables if t.state == state and t.table_kind == "keyed"]
    [f] = SnapshotTable(table.path, pa.schema([]), label=state).files(table.version)
    return f.size, pq.read_metadata(f"{table.path}/{f.path}")


def _rchar() -> int:
    """Bytes this process has read from files so far, as the kernel counts them."""
    with open("/proc/self/io") as io:
        return int(next(line for line in io if line.startswith("rchar:")).split()[1])


@pytest.fixture(scope="module", params=sorted(backend_names()))
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A checkpoint written by a task of each backend (one per backend for the module)."""
    return _checkpoint(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture
def unsorted_writer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The writer as it was before files were sorted: rows in the backend's order, no sort
    order in the footer (row groups bounded as now, so a lookup has several to choose from)."""
    monkeypatch.setattr(snapshot_files, "key_order", lambda rows: (rows, None))
    yield


def test_row_group_lookup_reads_one_row_group(big: StatecoreConfig) -> None:
    point = _point(big)
    size, footer = _state_file(point, "total")
    assert size > 2 * WHOLE_FILE_BYTES and footer.num_row_groups >= 10
    assert [c.column_index for c in footer.row_group(0).sorting_columns] == [0]
    before = _rchar()
    got = lookup_at(point, "total", "user-12345")  # cold: the version listed, footer read
    cold = _rchar() - before
    assert got.found and got.value.startswith("00012345")
    assert got.files_read == 1 and got.row_groups_read == 1
    assert got.bytes_read <= cold < 0.1 * size  # footer and one row group, all counted
    share = size / footer.num_row_groups  # a row group's share of the file
    before = _rchar()
    for i in range(0, KEYS, KEYS // 20):  # warm: the file map and footer kept
        warm = lookup_at(point, "total", f"user-{i}")
        assert warm.found and warm.value.startswith(f"{i:08d}") and warm.row_groups_read == 1
        assert warm.bytes_read < 1.5 * share
    assert _rchar() - before < 20 * 1.5 * share  # no listing of the version per key
    mapped = lookup_at(point, "items", "user-120")
    assert mapped.value == {"a": 120, "b": 121, "c": 122}
    assert lookup_at(point, "items", "user-120", user_key="b").value == {"b": 121}


def test_row_group_lookup_of_a_missing_key(big: StatecoreConfig) -> None:
    point = _point(big)
    size, _ = _state_file(point, "total")
    inside = lookup_at(point, "total", "user-12345x")  # between two keys of the file
    assert not inside.found and inside.value is None and inside.row_groups_read == 1
    assert inside.bytes_read < 0.1 * size
    before = _rchar()
    beyond = lookup_at(point, "total", "zebra")  # after every key: no row group can hold it
    assert not beyond.found and beyond.row_groups_read == 0 and beyond.bytes_read == 0
    assert _rchar() - before < 4096
    assert not lookup_at(point, "items", "user-121").found  # a key without map entries


def test_row_group_lookup_of_an_unsorted_old_file(
    unsorted_writer: None, tmp_path: Path, backend_name: str
) -> None:
    point = _point(_checkpoint(tmp_path, backend_name))
    size, footer = _state_file(point, "total")
    ranges = [footer.row_group(g).column(0).statistics for g in range(footer.num_row_groups)]
    assert any(a.max > b.min for a, b in zip(ranges, ranges[1:]))  # ranges overlap
    for i in (4_567, 15_000, 22_222):
        got = lookup_at(point, "total", f"user-{i}")
        assert got.found and got.value.startswith(f"{i:08d}")
        assert got.row_groups_read > 1 and got.bytes_read <= size + 65_536
    assert lookup_at(point, "items", "user-4560").value == {"a": 4560, "b": 4561, "c": 4562}
    assert not lookup_at(point, "total", "user-12345x").found


@pytest.fixture(params=sorted(backend_names()))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_row_group_lookup_of_a_truncated_file_is_a_clear_error(tmp_path: Path) -> None:
    point = _point(_checkpoint(tmp_path, "heap"))
    [table] = [t for t in point.tables if t.state == "total" and t.table_kind == "keyed"]
    [f] = SnapshotTable(table.path, pa.schema([]), label="total").files(table.version)
    path = Path(table.path) / f.path
    path.write_bytes(path.read_bytes()[: f.size // 2])
    with pytest.raises(CorruptSnapshotError, match=f"key group 0: file {f.path} .*no Parquet"):
        lookup_at(point, "total", "user-12345")
