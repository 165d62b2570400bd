"""Exports of savepoints on S3 (the test server on loopback): copied many files at a time,
server-side (no byte of a data file read by statecore), checked against the Delta log's sizes,
retried through throttling, and restoring to the same state as a pin of the same checkpoint.

The server's gate and throttling (:mod:`tests.object_store.s3_server`) show what the client
did: a gate that holds writes until several have arrived passes only parallel copies, and a
throttling rule on a data file's reads logs any read of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.config import StatecoreConfig
from statecore.errors import CorruptSnapshotError, SnapshotWriteError
from statecore.ops.savepoint import pin_savepoint, restore_savepoint, take_savepoint
from statecore.query.diff import checksums
from statecore.snapshot.rewrite import table_files
from statecore.snapshot.s3_copy import copy_object, s3_client
from statecore.snapshot.storage import S3Settings
from tests.object_store.conftest import S3Server
from tests.ops.conftest import JOB, tables
from tests.ops.statebuilder import write_checkpoint

USERS = {f"user-{i}": float(i) for i in range(12)}


def sums(point: RestorePoint) -> list[tuple[str, str, int, str]]:
    return [(c.table_kind, c.state, c.rows, c.checksum) for c in checksums(point)]


def objects(s3: S3Server, uri: str) -> dict[str, int]:
    """Every object under ``uri`` (``s3://bucket/prefix``) with its size."""
    root = uri.removeprefix("s3://")
    infos = s3.filesystem().get_file_info(
        pafs.FileSelector(root, recursive=True, allow_not_found=True)
    )
    return {i.path[len(root) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}


@pytest.fixture
def s3_job(s3_home: StatecoreConfig, s3_server: S3Server) -> Iterator[StatecoreConfig]:
    """Job ``clicks`` with checkpoint 1 in the S3 warehouse; no throttling rule or gate."""
    write_checkpoint(s3_home, JOB, 1, tables(USERS, 10_000))
    s3_server.unthrottle()
    yield s3_home
    s3_server.unthrottle()


def total_table(config: StatecoreConfig) -> tuple[str, int]:
    with Catalog.connect(config.catalog_url) as catalog:
        table = next(t for t in checkpoint_point(catalog, JOB).tables if t.state == "total")
    return table.path, table.version


def test_export_copies_in_parallel_and_restores_the_same_state_as_the_pin(
    s3_job: StatecoreConfig, s3_server: S3Server
) -> None:
    folder = f"{s3_job.warehouse}/_savepoints/{JOB}/export-1"
    # the next 4 writes of the export wait for each other: one copy at a time would wait
    # alone at the gate until the server gives up on the others, 4 at a time pass it together
    s3_server.gate(folder.removeprefix("s3://"), parties=4)
    with Catalog.connect(s3_job.catalog_url) as catalog:
        source = sums(checkpoint_point(catalog, JOB, 1))
        pin_savepoint(s3_job, catalog, JOB, name="pin-1", checkpoint_id=1)
        exported = take_savepoint(s3_job, catalog, JOB, name="export-1", checkpoint_id=1)
        assert exported.savepoint == folder
        restore_savepoint(s3_job, catalog, "pin-1", job=JOB, force=True)
        from_pin = sums(checkpoint_point(catalog, JOB))
        restore_savepoint(s3_job, catalog, "export-1", job=JOB, force=True)
        from_export = sums(checkpoint_point(catalog, JOB))
        [record] = [s for s in catalog.list_savepoints(JOB) if s.name == "export-1"]
    assert s3_server.gate_outcome() == "met", "the export's writes did not run together"
    assert from_pin == from_export == source and len(source) == 5
    assert (record.kind, record.path) == ("export", folder)


def test_export_server_side_copy_on_one_s3_endpoint(
    s3_job: StatecoreConfig, s3_server: S3Server
) -> None:
    path, version = total_table(s3_job)
    files = table_files(path, version)
    for f in files:  # any read of a data file (HEAD or GET) is answered 503 once and logged
        s3_server.throttle(f"{path.removeprefix('s3://')}/{f.path}", 1, "GET,HEAD")
    target = f"s3://savepoints/{s3_job.warehouse.rsplit('/', 1)[1]}"
    with Catalog.connect(s3_job.catalog_url) as catalog:
        exported = take_savepoint(s3_job, catalog, JOB, name="sp", target=target)
    assert s3_server.throttled() == []  # not one byte of a data file came through statecore
    copied = next(t for t in exported.tables if t.state == "total")
    assert copied.path == f"{target}/sp/main/keyed/total"
    in_export = objects(s3_server, copied.path)
    assert sorted(f.size for f in table_files(copied.path, copied.version)) == sorted(
        f.size for f in files
    )
    assert {f.path for f in table_files(copied.path, copied.version)} <= set(in_export)


def test_export_from_s3_to_a_local_folder_streams_and_restores(
    s3_job: StatecoreConfig, tmp_path: Path
) -> None:
    with Catalog.connect(s3_job.catalog_url) as catalog:
        source = sums(checkpoint_point(catalog, JOB, 1))
        exported = take_savepoint(s3_job, catalog, JOB, name="local", target=str(tmp_path))
    assert exported.savepoint == str(tmp_path / "local")
    assert sums(exported) == source  # the local export reads back as the S3 checkpoint


def test_export_size_mismatch_fails_clearly(s3_job: StatecoreConfig, s3_server: S3Server) -> None:
    path, version = total_table(s3_job)
    victim = table_files(path, version)[2]
    key = f"{path.removeprefix('s3://')}/{victim.path}"
    fs = s3_server.filesystem()
    with fs.open_input_stream(key) as source:
        data = source.read()
    with fs.open_output_stream(key) as out:
        out.write(data + b"\0" * 5)  # 5 bytes longer than the Delta log says
    folder = f"{s3_job.warehouse}/_savepoints/{JOB}/sp"
    s3_server.throttle(f"{folder.removeprefix('s3://')}/", 1, "PUT,POST")  # logs any write
    with Catalog.connect(s3_job.catalog_url) as catalog:
        with pytest.raises(CorruptSnapshotError) as refused:
            take_savepoint(s3_job, catalog, JOB, name="sp")
        assert catalog.list_savepoints(JOB) == []  # nothing registered
    assert str(refused.value) == (
        f"snapshot table {path} version {version}: file {victim.path} has "
        f"{victim.size + 5} bytes, the Delta log says {victim.size}"
    )
    assert s3_server.throttled() == []  # refused before any file was copied
    assert objects(s3_server, folder) == {}


def test_export_throttled_copy_retries(
    s3_job: StatecoreConfig, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = f"{s3_job.warehouse}/_savepoints/{JOB}"
    s3_server.throttle(f"{folder.removeprefix('s3://')}/sp/main/keyed/total/key_group=", 3, "PUT")
    with Catalog.connect(s3_job.catalog_url) as catalog:
        source = sums(checkpoint_point(catalog, JOB, 1))
        exported = take_savepoint(s3_job, catalog, JOB, name="sp")
    throttled = s3_server.unthrottle()
    assert len(throttled) == 3 and len(set(throttled)) == 1  # one copy, throttled 3 times
    assert sums(exported) == source

    # throttled through every attempt: a clear error, nothing left, nothing recorded
    monkeypatch.setenv("STATECORE_S3_MAX_ATTEMPTS", "2")
    s3_server.throttle(f"{folder.removeprefix('s3://')}/again/main/keyed/total/key_group=", 5)
    with Catalog.connect(s3_job.catalog_url) as catalog:
        with pytest.raises(SnapshotWriteError) as failed:
            take_savepoint(s3_job, catalog, JOB, name="again")
        assert [s.name for s in catalog.list_savepoints(JOB)] == ["sp"]
    message = str(failed.value)
    assert "cannot be copied to" in message and "main/keyed/total/key_group=" in message
    assert "SlowDown" in message and "STATECORE_S3_MAX_ATTEMPTS" in message
    assert objects(s3_server, f"{folder}/again") == {}


def test_export_multipart_copy_over_the_single_copy_limit(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``UploadPartCopy``, as an object over 5 GB is copied, here with S3's smallest parts."""
    part = 5 * 1024**2
    data = bytes(range(256)) * (part * 2 // 256) + b"tail"  # 3 parts: 5 MB, 5 MB, 4 bytes
    fs = s3_env.filesystem()
    with fs.open_output_stream("warehouse/multipart/source.bin") as out:
        out.write(data)
    client = s3_client(S3Settings.from_env(), 4)
    copy_object(
        client,
        "s3://warehouse/multipart/source.bin",
        "s3://savepoints/multipart/copy.bin",
        len(data),
        part_size=part,
        max_single=part,
    )
    with fs.open_input_stream("savepoints/multipart/copy.bin") as copied:
        assert copied.read() == data
    head = client.head_object(Bucket="savepoints", Key="multipart/copy.bin")
    assert head["ETag"].strip('"').endswith("-3")  # completed from 3 copied parts

    # a source shorter than the size it should have: the copy fails, no object is left
    with pytest.raises(OSError, match="S3 copy of s3://warehouse/multipart/source.bin"):
        copy_object(
            client,
            "s3://warehouse/multipart/source.bin",
            "s3://savepoints/multipart/short.bin",
            len(data) + part,
            part_size=part,
            max_single=part,
        )
    assert fs.get_file_info("savepoints/multipart/short.bin").type == pafs.FileType.NotFound
    uploads = client.list_multipart_uploads(Bucket="savepoints").get("Uploads", [])
    assert [u for u in uploads if u["Key"] == "multipart/short.bin"] == []  # aborted


def test_export_to_a_missing_bucket_fails_naming_it_not_the_credentials(
    s3_job: StatecoreConfig, s3_server: S3Server, capfd: pytest.CaptureFixture[str]
) -> None:
    with Catalog.connect(s3_job.catalog_url) as catalog:
        with pytest.raises(SnapshotWriteError) as failed:
            take_savepoint(s3_job, catalog, JOB, name="sp", target="s3://no-such-bucket/sp")
        assert catalog.list_savepoints(JOB) == []
    message, logs = str(failed.value), capfd.readouterr()
    assert "cannot be copied to s3://no-such-bucket/sp/sp/main/" in message
    assert "NoSuchBucket" in message
    for text in (message, logs.out + logs.err):
        assert s3_server.secret not in text
        assert s3_server.env["AWS_ACCESS_KEY_ID"] not in text
