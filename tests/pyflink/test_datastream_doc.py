"""The whole PyFlink job of docs/pyflink.md ('Whole jobs: the DataStream layer') runs as
written, with the output Flink gives, and its state is in SQL under the job's name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.query import run_sql

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyflink.md"

pytestmark = pytest.mark.spark


def test_pyflink_doc_job_runs_as_ported(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """BATCH: ann's clicks at 1 s and 9 s and bob's at 2 s; at the end every timer fires and
    only each user's last one (ann 39 s, bob 32 s) is current: one Row per user."""
    text = PAGE.read_text()
    start = text.index("## Whole jobs: the DataStream layer")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    code = match.group(1)
    assert "import pyflink" not in code.replace("# from pyflink", "")
    exec(compile(code, str(PAGE), "exec"), {"__name__": "pyflink_doc"})  # the page's own code
    assert sorted(capsys.readouterr().out.splitlines()) == ["+I[ann,2]", "+I[bob,1]"]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        rows = run_sql(
            catalog, "SELECT key, value FROM idle_users.clicks ORDER BY key", job="idle_users"
        ).to_pylist()
    assert rows == [{"key": "ann", "value": 2}, {"key": "bob", "value": 1}]
