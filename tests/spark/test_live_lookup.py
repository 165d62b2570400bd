"""Live lookups of a running stream (``keyed_stream(..., live_lookups=True)``): the task that
holds a key answers with its state as it is, ahead of a checkpoint that did not complete; when
no task answers, the lookup reads the latest checkpoint and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statecore.catalog import Catalog, LiveEndpoint
from statecore.cli import main
from statecore.query.lookup import lookup

from .stream_job import start
from .test_stream import spec, write_file

pytestmark = pytest.mark.spark


def test_stream_live_lookup_reads_the_running_task_and_falls_back(
    spark, statecore_home, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    s = spec(tmp_path, job="live")
    inp = Path(s["input"])
    write_file(inp, "f0", [("u1", 1000, 1), ("u2", 2000, 2)])
    query = start(spark, s, live_lookups=True)
    try:
        query.processAllAvailable()  # checkpoint 0 completes
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            [endpoint] = catalog.live_endpoints("live")
            token = catalog.live_token("live")
        assert (endpoint.key_group_start, endpoint.key_group_end, endpoint.checkpoint_id) == (
            0,
            127,
            0,
        )
        assert token and not endpoint.address.startswith(("0.0.0.0", "["))
        found = lookup("live", "total", "u1", live=True, config=statecore_home)
        assert (found.live, found.value, found.live_checkpoint, found.uncommitted) == (
            True,
            1,
            0,
            False,
        )
        assert found.fallback is None and found.files_read == 0

        # micro-batch 1 is processed by the task, but its checkpoint fails to complete
        def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("the catalog refused checkpoint 1")

        monkeypatch.setattr(Catalog, "complete_checkpoint", refuse)
        write_file(inp, "f1", [("u1", 3000, 5)])
        with pytest.raises(Exception, match="refused checkpoint 1"):
            query.processAllAvailable()
    finally:
        query.stop()
        monkeypatch.undo()
    live = lookup("live", "total", "u1", live=True, config=statecore_home)
    assert (live.live, live.value, live.live_checkpoint, live.uncommitted) == (True, 6, 1, True)
    assert main(["--home", statecore_home.home, "state", "get", "live", "total", "u1", "--live",
                 "--format", "json"]) == 0  # fmt: skip
    [shown] = json.loads(capsys.readouterr().out)
    assert (shown["live"], shown["value"], shown["uncommitted"]) == (True, 6, True)
    checkpointed = lookup("live", "total", "u1", config=statecore_home)
    assert (checkpointed.live, checkpointed.value) == (False, 1)
    assert "checkpoint 0" in checkpointed.point

    # the task is gone (its address answers nothing): the latest checkpoint, with the reason
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        catalog.set_live_endpoints(
            "live",
            "main",
            [
                LiveEndpoint(
                    job="live",
                    operator="main",
                    subtask=0,
                    key_group_start=0,
                    key_group_end=127,
                    address="127.0.0.1:9",
                    checkpoint_id=0,
                )
            ],
        )
    fell_back = lookup("live", "total", "u1", live=True, config=statecore_home)
    assert (fell_back.live, fell_back.value) == (False, 1)
    assert "did not answer" in fell_back.fallback
    assert (
        main(["--home", statecore_home.home, "state", "get", "live", "total", "u1", "--live"]) == 0
    )
    assert "live lookup fell back to checkpoint 0" in capsys.readouterr().err
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        catalog.set_live_endpoints("live", "main", [])  # a run without live lookups
    never = lookup("live", "total", "u2", live=True, config=statecore_home)
    assert (never.live, never.value) == (False, 2)
    assert "live_lookups=True" in never.fallback
