"""Output compaction on S3 (a real S3 API server on loopback): the scheduled maintenance merges
the small files of the checkpoints it no longer retains in an output table in another bucket,
every row stays once, each retained checkpoint's version still opens with its rows, and VACUUM
deletes the merged-away objects once no retained version needs them
(:mod:`tests.ops.test_output_compaction` holds the same on local disk, with more cases)."""

from __future__ import annotations

import pyarrow.fs as pafs

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.snapshot.output import output_version_at
from statecore.snapshot.output_compaction import COMPACTED_PREFIX
from statecore.snapshot.storage import open_table
from tests.object_store.conftest import S3Server
from tests.ops.test_output_compaction import maintain, rows, stream

RETAIN = 2


def objects(server: S3Server, uri: str) -> set[str]:
    """The Parquet objects under the table at ``uri``, live or not."""
    selector = pafs.FileSelector(uri.removeprefix("s3://"))
    infos = server.filesystem().get_file_info(selector)
    return {i.base_name for i in infos if i.base_name.endswith(".parquet")}


def test_object_store_output_compaction_merges_and_vacuums(
    s3_home: StatecoreConfig, s3_server: S3Server
) -> None:
    output = f"s3://output/{s3_home.warehouse.rsplit('/', 1)[1]}/out"
    with Catalog.connect(s3_home.catalog_url) as catalog:
        stream(s3_home, catalog, output, range(6))
        before = rows(output)
        at = {i: rows(output, output_version_at(output, i)) for i in (4, 5)}
        report = maintain(s3_home, catalog, output, retain=RETAIN)
        assert report["retained"] == [4, 5]
        assert report["compacted"] == [{"path": output, "files_merged": 4, "files_written": 1}]
        live = {u.rsplit("/", 1)[-1] for u in open_table(output).file_uris()}
        assert len(live) == 3 and rows(output) == before  # 1 merged + the 2 retained ones
        assert sum(n.startswith(COMPACTED_PREFIX) for n in live) == 1
        for i in (4, 5):
            assert rows(output, output_version_at(output, i)) == at[i]
        assert len(objects(s3_server, output)) == 7  # the retained versions still read them

        # two micro-batches on, no retained version reads the files of 0..3: VACUUM deletes them
        stream(s3_home, catalog, output, range(6, 8))
        after = rows(output)
        maintain(s3_home, catalog, output, retain=RETAIN)
        assert rows(output) == after
        kept = objects(s3_server, output)
        assert not any(f"cp{i:012d}" in name for name in kept for i in range(4)), kept
