"""Pending output on S3 (the moto server): staged under the warehouse's prefix, outside the
output table's prefix, so deltalake's VACUUM of the output table (retention 0, lite and full)
deletes only the copy placed for a commit not made yet; the roll-forward copies it again
(server-side) and commits it, and a VACUUM racing the commit is repaired from the staged copy.
Read back by DuckDB (with its S3 settings)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs
import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.output_records import pending_records_folder
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import OutputFilesMissingError
from statecore.snapshot.commits import head_version
from statecore.snapshot.storage import table_filesystem
from tests.checkpoint.test_participants import JOB, Run
from tests.checkpoint.test_pending_output import (
    Hook,
    assert_exactly,
    at_point,
    other_tool_vacuum,
    pending_after_failed_commit,
    read_values,
)

__all__ = ["at_point"]  # the fixture, used by name


@pytest.fixture
def catalog(s3_home: StatecoreConfig) -> Iterator[Catalog]:
    opened = Catalog.connect(s3_home.catalog_url)
    opened.ensure_job(JOB, parallelism=1, max_parallelism=128)
    yield opened
    opened.close()


def _staged(config: StatecoreConfig) -> list[str]:
    fs, root = table_filesystem(pending_records_folder(config.warehouse, JOB))
    found = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True, recursive=True))
    return sorted(i.path for i in found if i.type == pafs.FileType.File and "parquet" in i.path)


def _output_root() -> str:
    return f"s3://output/pending-{secrets.token_hex(4)}"


@pytest.mark.parametrize("by", ["next run", "catalog recover"])
def test_pending_output_on_s3_survives_other_tool_vacuum_and_rolls_forward(
    s3_home: StatecoreConfig, catalog: Catalog, at_point: Hook, by: str
) -> None:
    run = Run(s3_home, catalog, _output_root())
    pending_after_failed_commit(run, at_point)
    staged = _staged(s3_home)
    assert len(staged) == 2 and all(s.startswith(s3_home.warehouse[5:]) for s in staged)
    deleted = other_tool_vacuum(run.output.uri, run.late.uri)
    assert len(deleted) == 1 and "part-cp000000000002-" in deleted[0], deleted
    assert read_values(run.output.uri) == [1]
    if by == "next run":
        assert run.checkpoint(3) is CheckpointStatus.COMPLETED
        expected = [1, 2, 3]
    else:
        assert main(["--home", s3_home.home, "catalog", "recover", JOB]) == 0
        expected = [1, 2]
    assert_exactly(run, expected)
    assert catalog.pending_outputs(JOB) == []
    assert _staged(s3_home) == []


def test_other_tool_vacuum_racing_the_commit_on_s3_is_repaired(
    s3_home: StatecoreConfig, catalog: Catalog, at_point: Hook
) -> None:
    run = Run(s3_home, catalog, _output_root())
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    raced: list[Any] = []
    at_point("output:commit:before", lambda: raced.extend(other_tool_vacuum(run.output.uri)))
    assert run.checkpoint(2) is CheckpointStatus.COMPLETED
    assert any("part-cp000000000002-" in d for d in raced), raced
    assert_exactly(run, [1, 2])
    assert _staged(s3_home) == []


def test_pending_output_on_s3_staged_file_deleted_fails_naming_it(
    s3_home: StatecoreConfig, catalog: Catalog, at_point: Hook
) -> None:
    run = Run(s3_home, catalog, _output_root())
    pending_after_failed_commit(run, at_point)
    other_tool_vacuum(run.output.uri)
    lost = next(s for s in _staged(s3_home) if "/output/" in s)
    fs, _ = table_filesystem(s3_home.warehouse)
    fs.delete_file(lost)
    head = head_version(run.output.uri)
    with pytest.raises(OutputFilesMissingError, match=lost.rpartition("/")[2]) as raised:
        run.checkpoint(3)
    assert "checkpoint 2" in str(raised.value) and run.output.uri in str(raised.value)
    assert head_version(run.output.uri) == head
    assert read_values(run.output.uri) == [1]
