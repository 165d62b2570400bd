"""Latent bugs of a run's commit path, each shown by a real Spark run: the persisted result of a
run without an output table leaks into Spark's cache when the commit fails; an error raised in a
task comes back cut at its first newline (or buried in a traceback); a savepoint was restored
under a lease of its own, taken before the run's, so another writer could come in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import RUN_OPERATION, Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointCommitError, StateAccessError
from statecore.ops import savepoint
from statecore.runtime import Context, KeyedProcessFunction
from statecore.spark import keyed_process

from .test_vectorized import INPUT, OUTPUT, PerRecordSum, events

pytestmark = pytest.mark.spark


def _run(spark: Any, config: StatecoreConfig, checkpoint_id: int, **options: Any) -> Any:
    return keyed_process(
        spark.createDataFrame(events(100 * checkpoint_id, 50), INPUT),
        key="user",
        function=options.pop("function", PerRecordSum()),
        output_schema=OUTPUT,
        job="latent",
        checkpoint_id=checkpoint_id,
        parallelism=2,
        order_by=["seq"],
        config=config,
        **options,
    )


def _persisted(spark: Any) -> int:
    return int(spark.sparkContext._jsc.getPersistentRDDs().size())


def test_latent_a_failed_commit_unpersists_the_result(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    before = _persisted(spark)

    def crash(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise CheckpointCommitError("the catalog is gone")

    monkeypatch.setattr(CheckpointCoordinator, "commit", crash)
    for attempt in range(2):  # a stream retrying the micro-batch
        with pytest.raises(CheckpointCommitError, match="the catalog is gone"):
            _run(spark, config, 1)
        assert _persisted(spark) == before, f"attempt {attempt}: the result is still cached"
    monkeypatch.undo()
    run = _run(spark, config, 1)
    assert run.output.count() == 50
    run.unpersist()
    assert _persisted(spark) == before


class Raises(KeyedProcessFunction):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def process_element(self, value: Any, ctx: Context) -> Any:
        raise self.error
        yield  # pragma: no cover


def test_latent_a_task_error_keeps_its_whole_message(spark: Any, tmp_path: Path) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    message = "state 'total' of key 'u1': bad value\n  expected int64\nsee the descriptor"
    with pytest.raises(StateAccessError) as raised:
        _run(spark, config, 1, function=Raises(StateAccessError(message)))
    assert str(raised.value) == f"job 'latent', checkpoint 1: {message}"
    with pytest.raises(CheckpointCommitError) as foreign:
        _run(spark, config, 1, function=Raises(ValueError("not a number\nin column amount")))
    assert str(foreign.value) == (
        "job 'latent', checkpoint 1 failed in a Spark task: ValueError: not a number\n"
        "in column amount"
    )
    assert "Traceback" in str(foreign.value.__cause__)  # the worker's own report


def test_latent_restore_from_a_savepoint_happens_under_the_runs_own_lease(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    _run(spark, config, 1).unpersist()
    with Catalog.connect(config.catalog_url) as catalog:
        saved = savepoint.take_savepoint(config, catalog, "latent", name="one")
    _run(spark, config, 2).unpersist()
    holders: list[str] = []
    real_import, real_acquire = savepoint.import_point, Catalog.acquire_lease
    leases: list[str] = []

    def import_point(config: Any, catalog: Catalog, point: Any, **kwargs: Any) -> Any:
        lock = catalog.maintenance_lock(point.job)
        holders.append("" if lock is None else lock.operation)
        return real_import(config, catalog, point, **kwargs)

    def acquire_lease(self: Catalog, job: str, **kwargs: Any) -> Any:
        leases.append(kwargs["operation"])
        return real_acquire(self, job, **kwargs)

    monkeypatch.setattr(savepoint, "import_point", import_point)
    monkeypatch.setattr(Catalog, "acquire_lease", acquire_lease)
    run = _run(spark, config, 3, restore_from=saved.savepoint, force_restore=True)
    run.unpersist()
    assert holders == [f"{RUN_OPERATION} 3"]  # restored while the run held the job
    assert leases == [f"{RUN_OPERATION} 3"]  # one lease, never released in between
    assert run.checkpoint.restored_from is not None and run.checkpoint.restored_from >= 10**18
