"""The job's lease in the catalog (SQLite and Postgres): one holder at a time, a fencing epoch
that increases with every acquisition, takeover only once expired on the catalog's clock (or
its process provably gone: this host and pid space), and
commits of a writer whose epoch is stale refused; checkpoint ids that must increase, and replays
whose input differs."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus, TableVersion
from statecore.checkpoint.lock import hold_lease
from statecore.config import StatecoreConfig
from statecore.errors import (
    CheckpointOrderError,
    ConcurrentRunError,
    ConfigError,
    MaintenanceLockedError,
    ReplayMismatchError,
)
from statecore.processes import process_owner

JOB = "clicks"
SHORT = timedelta(seconds=0.5)


@pytest.fixture
def job_catalog(catalog: Catalog) -> Catalog:
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    return catalog


def _begin(catalog: Catalog, checkpoint_id: int, **options: object) -> None:
    catalog.begin_checkpoint(
        JOB,
        checkpoint_id,
        kind=CheckpointKind.CHECKPOINT,
        parallelism=2,
        max_parallelism=128,
        **options,  # type: ignore[arg-type]
    )


def _table(version: int) -> TableVersion:
    return TableVersion(
        operator="main", state="total", table_kind="keyed", path="/wh/t", version=version,
        rows=1, bytes=10,
    )  # fmt: skip


def test_fencing_a_run_holds_the_job_until_its_lease_expires(job_catalog: Catalog) -> None:
    catalog = job_catalog
    first = catalog.acquire_lease(JOB, operation="run 1", owner="host-a:1:x", timeout=SHORT)
    assert first.epoch == 1 and catalog.maintenance_lock(JOB) == first
    with pytest.raises(ConcurrentRunError, match=r"the run 'run 1' \(host-a:1:x\).*epoch 1") as e:
        catalog.acquire_lease(JOB, operation="run 2", owner="host-b:2:y", timeout=SHORT)
    assert not isinstance(e.value, MaintenanceLockedError)
    with pytest.raises(ConcurrentRunError, match="'run 1'") as e:  # maintenance waits too
        catalog.acquire_maintenance_lock(JOB, operation="rescale", owner="host-b:2:y")
    assert not isinstance(e.value, MaintenanceLockedError)  # that is for maintenance holders
    time.sleep(0.6)  # expired, but renewed by its holder before anyone took it over
    assert catalog.renew_lease(JOB, epoch=1, timeout=timedelta(seconds=1)) is not None
    with pytest.raises(ConcurrentRunError):
        catalog.acquire_lease(JOB, operation="run 2", owner="host-b:2:y", timeout=SHORT)
    time.sleep(1.1)  # not renewed: expired, taken over with a larger epoch
    second = catalog.acquire_lease(JOB, operation="run 2", owner="host-b:2:y", timeout=SHORT)
    assert second.epoch == 2
    assert catalog.renew_lease(JOB, epoch=1, timeout=SHORT) is None
    with pytest.raises(ConcurrentRunError, match=r"epoch 1 was lost.*'run 2' \(host-b:2:y\)"):
        catalog.check_lease(JOB, epoch=1)
    catalog.check_lease(JOB, epoch=2)
    assert catalog.release_maintenance_lock(JOB, owner="host-a:1:x") is None  # not its lease
    assert catalog.release_maintenance_lock(JOB, owner="host-b:2:y") == second
    third = catalog.acquire_lease(JOB, operation="ttl-cleanup", owner="h:3:z", timeout=SHORT)
    assert third.epoch == 3  # epochs never repeat, also after a release


def test_fencing_a_stale_writer_neither_begins_completes_nor_fails(job_catalog: Catalog) -> None:
    catalog = job_catalog
    catalog.acquire_lease(JOB, operation="run 5", owner="a", timeout=timedelta(0))
    _begin(catalog, 5, epoch=1)
    catalog.acquire_lease(JOB, operation="run 5", owner="b", timeout=timedelta(minutes=1))
    with pytest.raises(ConcurrentRunError, match="epoch 1 was lost"):
        catalog.complete_checkpoint(JOB, 5, tables=[_table(1)], epoch=1)
    assert catalog.get_checkpoint(JOB, 5).status is CheckpointStatus.IN_PROGRESS
    with pytest.raises(ConcurrentRunError):
        _begin(catalog, 6, epoch=1)
    _begin(catalog, 5, epoch=2)  # the new holder retries checkpoint 5
    failed_late = catalog.fail_checkpoint(JOB, 5, error="stale writer gives up", epoch=1)
    assert failed_late.status is CheckpointStatus.IN_PROGRESS  # left to the new holder
    with pytest.raises(ConcurrentRunError, match="epoch 1 was lost"):
        catalog.complete_checkpoint(JOB, 5, tables=[], epoch=1)
    done = catalog.complete_checkpoint(JOB, 5, tables=[_table(2)], epoch=2)
    assert done.status is CheckpointStatus.COMPLETED and done.tables == (_table(2),)


def _gone_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(gone.stdout.strip())


def test_fencing_a_lease_of_a_process_gone_from_this_host_is_taken_over(
    job_catalog: Catalog,
) -> None:
    owner = process_owner(_gone_pid())  # this host, this pid space, a pid that is gone
    job_catalog.acquire_lease(JOB, operation="run 1", owner=owner, timeout=timedelta(hours=1))
    alive = process_owner(1)  # pid 1 exists
    taken = job_catalog.acquire_lease(JOB, operation="run 2", owner=alive, timeout=SHORT)
    assert taken.epoch == 2
    with pytest.raises(ConcurrentRunError):
        job_catalog.acquire_lease(JOB, operation="run 3", owner="x", timeout=SHORT)


def test_fencing_containers_sharing_a_hostname_and_pid_do_not_take_each_others_live_lease(
    job_catalog: Catalog,
) -> None:
    """Two containers named alike (``hostname: worker``), each its holder's pid in a pid
    namespace of its own: a pid of the other container is not one to look up here, so its
    live lease stands until it expires (before, a pid absent here judged the holder gone)."""
    host, pid = socket.gethostname(), _gone_pid()
    for other in (f"{host}:{pid}:a1b2c3d4:0123456789ab", f"{host}:{pid}:a1b2c3d4"):
        job_catalog.acquire_lease(JOB, operation="run 1", owner=other, timeout=SHORT)
        with pytest.raises(ConcurrentRunError, match="'run 1'"):  # same host name, same pid
            job_catalog.acquire_lease(JOB, operation="run 2", owner=process_owner(pid))
        time.sleep(0.6)  # its lease expired: taken over
        taken = job_catalog.acquire_lease(JOB, operation="run 2", owner=process_owner())
        assert job_catalog.release_maintenance_lock(JOB, owner=taken.owner) == taken


def _client_clock(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """This client's clock (``now`` of the catalog's modules) runs ``offset`` off."""
    for name, module in list(sys.modules.items()):
        if name.startswith("statecore.catalog") and callable(getattr(module, "now", None)):
            monkeypatch.setattr(module, "now", lambda: datetime.now(UTC) + offset)


def test_fencing_a_client_clock_ahead_does_not_take_a_live_lease(
    job_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = job_catalog.acquire_lease(
        JOB, operation="run 1", owner="host-a:1:x", timeout=timedelta(minutes=5)
    )
    _client_clock(monkeypatch, timedelta(hours=1))  # its expiry is in this client's past
    with pytest.raises(ConcurrentRunError, match="'run 1'"):
        job_catalog.acquire_lease(JOB, operation="run 2", owner="host-b:2:y", timeout=SHORT)
    assert job_catalog.renew_lease(JOB, epoch=held.epoch, timeout=SHORT) is not None
    renewed = job_catalog.maintenance_lock(JOB)
    assert renewed is not None and renewed.expires_at is not None
    assert renewed.expires_at < datetime.now(UTC) + timedelta(minutes=1)  # the catalog's time


def test_fencing_a_client_clock_behind_takes_an_expired_lease(
    job_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_catalog.acquire_lease(JOB, operation="run 1", owner="host-a:1:x", timeout=SHORT)
    time.sleep(0.6)  # expired on the catalog's clock
    _client_clock(monkeypatch, -timedelta(hours=1))  # not yet on this client's
    taken = job_catalog.acquire_lease(JOB, operation="run 2", owner="host-b:2:y", timeout=SHORT)
    assert taken.epoch == 2


def test_fencing_checkpoint_ids_increase_when_asked(job_catalog: Catalog) -> None:
    catalog = job_catalog
    _begin(catalog, 10, increasing=True)
    catalog.complete_checkpoint(JOB, 10, tables=[])
    _begin(catalog, 9)  # the catalog alone does not order ids
    with pytest.raises(CheckpointOrderError, match="checkpoint 8 of job 'clicks' is below.*10"):
        _begin(catalog, 8, increasing=True)
    with pytest.raises(CheckpointOrderError):
        _begin(catalog, 9, increasing=True)  # a retry of an older failed id rewrites history
    _begin(catalog, 10, increasing=True)  # a replay of a completed id stays a no-op
    catalog.begin_checkpoint(JOB, 10**18 + 1, kind=CheckpointKind.MAINTENANCE, parallelism=2,
                             max_parallelism=128)  # fmt: skip
    catalog.complete_checkpoint(JOB, 10**18 + 1, tables=[])
    _begin(catalog, 11, increasing=True)  # maintenance ids do not count
    assert catalog.latest_checkpoint_id(JOB) == 10


def test_bad_input_a_replay_with_other_input_is_refused(job_catalog: Catalog) -> None:
    catalog = job_catalog
    _begin(catalog, 3, input_identity="files:2:abc")
    catalog.complete_checkpoint(JOB, 3, tables=[])
    assert catalog.get_checkpoint(JOB, 3).input_identity == "files:2:abc"
    _begin(catalog, 3, input_identity="files:2:abc")
    _begin(catalog, 3)  # no identity given: not checked
    with pytest.raises(ReplayMismatchError, match="checkpoint 3 of job 'clicks'.*files:2:abc"):
        _begin(catalog, 3, input_identity="files:2:def")
    assert catalog.get_checkpoint(JOB, 3).status is CheckpointStatus.COMPLETED


def test_bad_input_a_micro_batch_recorded_without_offsets_replays_with_them(
    job_catalog: Catalog,
) -> None:
    """A stream's checkpoint completed before micro-batches recorded their offsets, replayed
    by Spark after the upgrade with them: the same micro-batch. Another batch id is not."""
    catalog = job_catalog
    _begin(catalog, 4, input_identity='given:{"batch_id":4}')
    catalog.complete_checkpoint(JOB, 4, tables=[])
    offsets = '"offsets":{"end":[{"t":{"0":9}}],"start":null}'
    _begin(catalog, 4, input_identity='given:{"batch_id":4,' + offsets + "}")
    with pytest.raises(ReplayMismatchError, match="checkpoint 4"):
        _begin(catalog, 4, input_identity='given:{"batch_id":5,' + offsets + "}")
    with pytest.raises(ReplayMismatchError, match="checkpoint 4"):
        _begin(catalog, 4, input_identity='given:{"batch_id":4,"other":1}')


def test_fenced_maintenance_waits_lease_wait_for_the_job_then_names_the_holder(
    job_catalog: Catalog,
) -> None:
    """A writer given ``lease_wait`` tries again until the holder lets go (then holds the job
    with the next epoch), or fails naming the holder and how long it waited; without it, it is
    refused at once."""
    catalog = job_catalog
    run = catalog.acquire_lease(JOB, operation="run 7", owner="host-a:1:x", timeout=SHORT * 20)
    with pytest.raises(ConcurrentRunError, match=r"run 'run 7'") as refused:
        with hold_lease(catalog, JOB, "savepoint", wait=timedelta(0)):
            pass
    assert "waited" not in str(refused.value)
    with pytest.raises(ConcurrentRunError, match=r"run 'run 7'.*\(waited 1 s for it\)"):
        with hold_lease(catalog, JOB, "savepoint", wait=timedelta(seconds=1)):
            pass
    threading.Timer(1.0, lambda: catalog.release_maintenance_lock(JOB, owner=run.owner)).start()
    with hold_lease(catalog, JOB, "savepoint", wait=timedelta(seconds=60)) as lease:
        assert lease.epoch == run.epoch + 1
        assert catalog.maintenance_lock(JOB).operation == "savepoint"
    assert catalog.maintenance_lock(JOB) is None


def test_bad_input_lease_wait_is_seconds_not_negative(tmp_path: Path) -> None:
    env = {"STATECORE_HOME": str(tmp_path)}
    assert StatecoreConfig.resolve(env={**env, "STATECORE_LEASE_WAIT": "90"}).lease_wait == (
        timedelta(seconds=90)
    )
    (tmp_path / "statecore.toml").write_text("[statecore]\nlease_wait = 2.5\n")
    assert StatecoreConfig.resolve(env=env).lease_wait == timedelta(seconds=2.5)
    with pytest.raises(ConfigError, match="lease_wait 'soon' is not seconds"):
        StatecoreConfig.resolve(env={**env, "STATECORE_LEASE_WAIT": "soon"})
    with pytest.raises(ConfigError, match="lease_wait must not be negative"):
        StatecoreConfig.resolve(env={**env, "STATECORE_LEASE_WAIT": "-5"})
