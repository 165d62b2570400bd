"""The statecore page's "Pending output" section, without a browser: the rows of
:func:`statecore.ops.overview.pending_outputs_overview` over a real catalog and real Delta
tables (the coordinator of :mod:`tests.checkpoint.test_participants`), rendered by
:func:`statecore_airflow.ui.pages.job_page` as the page's route does."""

from __future__ import annotations

import json
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.ops.overview import job_overview, pending_outputs_overview
from statecore.ops.pending import NOT_ATTEMPTED
from statecore_airflow.ui import pages
from tests.checkpoint.test_participants import JOB, Run
from tests.checkpoint.test_pending_output import (  # noqa: F401 (fixtures)
    Hook,
    at_point,
    catalog,
    config,
    pending_after_failed_commit,
)


def _page(opened: Catalog, rows: list[dict[str, Any]]) -> str:
    return pages.job_page(
        "/statecore/",
        job_overview(opened, JOB),
        checkpoints=[],
        savepoints=[],
        runs=[],
        states=[],
        pending_outputs=rows,
    )


@pytest.mark.parametrize("why", ["failed commit", "not attempted"])
def test_ui_page_pending_output_says_which_since_when_why_and_what_commits_it(
    config: StatecoreConfig,  # noqa: F811
    catalog: Catalog,  # noqa: F811
    tmp_path: Path,
    at_point: Hook,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    why: str,
) -> None:
    run = Run(config, catalog, tmp_path)
    if why == "failed commit":
        pending_after_failed_commit(run, at_point)
        reason = "Injected: injected at output:commit:before"
        late = NOT_ATTEMPTED  # the output's commit failed first: the late data's never ran
    else:  # the writer stopped between the completion and the output commit
        from statecore.checkpoint import coordinator

        assert run.checkpoint(1) is CheckpointStatus.COMPLETED
        real = coordinator.roll_forward
        monkeypatch.setattr(
            coordinator,
            "roll_forward",
            lambda *a, **kw: [] if kw.get("checkpoint_id") == 2 else real(*a, **kw),
        )
        assert run.checkpoint(2) is CheckpointStatus.COMPLETED
        monkeypatch.undo()
        reason = late = NOT_ATTEMPTED
    completed_at = catalog.get_checkpoint(JOB, 2).completed_at
    assert completed_at is not None
    rows = pending_outputs_overview(catalog, JOB)
    json.dumps(rows)  # the JSON route's answer as it is
    assert [(r["checkpoint"], r["output"], r["table"], r["why"]) for r in rows] == [
        (2, "output", run.output.uri, reason),
        (2, "late-data", run.late.uri, late),
    ]
    assert [r["attempted"] for r in rows] == [why == "failed commit", False]
    html = _page(catalog, rows)
    section = unescape(html.split("id='pending-output'")[1].split("id='checkpoints'")[0])
    assert "Checkpoint(s) 2 completed, but their output is not in its tables yet" in section
    assert run.output.uri in section and run.late.uri in section and reason in section
    assert late in section
    assert f"{completed_at:%Y-%m-%d %H:%M:%S}" in section
    assert "state_maintenance" in section and f"statecore catalog recover {JOB}" in section
    assert f"href='jobs/{JOB}/checkpoints/2'" in section
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED  # the next run commits it
    assert pending_outputs_overview(catalog, JOB) == []
    assert "pending-output" not in _page(catalog, [])
