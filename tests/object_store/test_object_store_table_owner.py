"""One owner per output table on S3 (the moto server): a table written as ``s3a://`` is the
table spelled ``s3://``; its owner, recorded in the table, refuses another job however it spells
the location, and nothing is added to the table."""

from __future__ import annotations

import secrets

import pyarrow as pa
import pytest

from statecore.config import StatecoreConfig
from statecore.errors import TableOwnedError
from statecore.snapshot.commits import head_version
from statecore.snapshot.locations import OWNER_PROPERTY, canonical_location, output_app_id
from statecore.snapshot.output import OutputTable, OutputWriter
from statecore.snapshot.storage import open_table

SCHEMA = pa.schema([("value", pa.int64())])


def _commit(uri: str, home: StatecoreConfig, job: str, checkpoint_id: int) -> OutputTable:
    table = OutputTable(uri, SCHEMA, app_id=output_app_id(home.warehouse, job, "main"))
    writer = OutputWriter(
        uri, SCHEMA, checkpoint_id=checkpoint_id, subtask=0, staging=f"{home.warehouse}/stage"
    )
    writer.write(pa.record_batch({"value": [checkpoint_id]}, schema=SCHEMA))
    written = writer.close()
    assert written is not None
    table.commit([written], checkpoint_id=checkpoint_id)
    return table


def test_table_owner_on_s3_whatever_the_scheme(s3_home: StatecoreConfig) -> None:
    name = f"output/owner-{secrets.token_hex(4)}"
    owner = _commit(f"s3a://{name}/", s3_home, "a", 1)
    assert canonical_location(f"s3a://{name}/") == f"s3://{name}"
    assert open_table(f"s3://{name}").metadata().configuration[OWNER_PROPERTY] == owner.app_id
    with pytest.raises(TableOwnedError, match=f"owned by {owner.app_id}"):
        _commit(f"s3://{name}", s3_home, "b", 1)
    assert head_version(f"s3://{name}") == open_table(f"s3a://{name}").version()
    assert open_table(f"s3://{name}").to_pyarrow_table().column("value").to_pylist() == [1]
