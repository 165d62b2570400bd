"""Warm state hosts (:mod:`statecore.spark.host`) against another local user and against their
own races, on the executor's task code in this process (as ``test_warm_state`` runs it).

Attacks: a hosts' folder that is a symbolic link (planted before the first task, or swapped in
after it), a folder or socket of another user, a host of another user, a forged error reply
that would run code when unpickled, a forged report naming files outside the task's tables.
Each is refused: the task restores cold in its worker (a folder, socket or host it may not
trust) or fails without committing what the reply named (a forged reply); the state is right.

Races that ended a query: a task waiting while its host exits, a long task's host evicted as
idle, a task its host cannot load, statecore shipped with the job (``--py-files``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore.config import StatecoreConfig
from statecore.runtime.warm import WARM_POOL
from statecore.spark import host
from statecore.spark.executor import META, run_task
from statecore.spark.host import host_address, hosted
from statecore.spark.host_wire import HostReplyError

from .test_warm_state import OUTPUT, Totals, cold, events, run

JOB = "guarded"
OWN = os.getuid()
NOBODY = 65534


hosted_task = functools.partial(hosted, fallback=run_task)
"""A task in its warm state host, run in the worker when the host is not to be trusted."""


@pytest.fixture(autouse=True)
def empty_pool() -> Iterator[None]:
    WARM_POOL.clear()
    yield
    WARM_POOL.clear()


def root_of(host_dir: Path) -> Path:
    return host_dir / f"statecore-hosts-{OWN}"


def sockets(host_dir: Path) -> list[Path]:
    return sorted(host_dir.glob("**/*.sock"))


def cold_rows(config: StatecoreConfig, count: int, parallelism: int = 2) -> list[list[Any]]:
    runs = [
        {"records": events(i), "checkpoint_id": i, "parallelism": parallelism}
        for i in range(1, count + 1)
    ]
    return cold(config, runs, "cold")


def refused(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_host_security_a_hosts_folder_planted_as_a_link_is_refused_and_tasks_restore_cold(
    statecore_home: StatecoreConfig,
    host_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another user plants ``statecore-hosts-<uid>`` as a link to a folder of theirs: no host
    starts there, each task runs in its worker (restores cold, then keeps its state there as
    with warm hosts off) and the state is right."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    root_of(host_dir).symlink_to(theirs)
    expected = cold_rows(statecore_home, 2)
    for i in (1, 2):
        rows, restore = run(statecore_home, events(i), job=JOB, checkpoint_id=i, runner=hosted_task)
        assert rows == expected[i - 1]
        assert restore["warm_tasks"] == (0 if i == 1 else 2)  # kept in this "worker"
    assert not sockets(theirs)
    assert any("is not a folder (a symbolic link" in m for m in refused(caplog))


def test_host_security_a_hosts_folder_swapped_for_a_link_after_the_first_task_is_refused(
    statecore_home: StatecoreConfig,
    host_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The folder is checked at every connection, not once per process: swapped for a link
    after the first tasks, the next tasks do not follow it (they restore cold)."""
    expected = cold_rows(statecore_home, 2)
    rows, _ = run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    assert rows == expected[0]
    moved = tmp_path / "moved"
    root_of(host_dir).rename(moved)
    root_of(host_dir).symlink_to(moved)  # the hosts still listen, behind a link
    rows, restore = run(statecore_home, events(2), job=JOB, checkpoint_id=2, runner=hosted_task)
    assert rows == expected[1]
    assert restore["warm_tasks"] == 0
    assert any("is not a folder (a symbolic link" in m for m in refused(caplog))
    for address in moved.glob("*/*.sock"):  # the hosts behind the link exit
        with Client(str(address), family="AF_UNIX") as connection:
            connection.send_bytes(host.EXIT)


def test_host_security_a_hosts_folder_of_another_user_is_refused_and_tasks_restore_cold(
    statecore_home: StatecoreConfig, host_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder another user made first (here: owned by ``nobody``) denies no stream: its
    tasks run in their workers."""
    root_of(host_dir).mkdir(mode=0o700)
    os.chown(root_of(host_dir), NOBODY, NOBODY)
    expected = cold_rows(statecore_home, 1)
    rows, restore = run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    assert rows == expected[0]
    assert restore["warm_tasks"] == 0
    assert not sockets(host_dir)
    assert any(f"(owner {NOBODY}, this user {OWN}" in m for m in refused(caplog))


def test_host_security_a_socket_of_another_user_is_refused(
    statecore_home: StatecoreConfig, host_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A socket in the folder that is not this user's is not connected to: its subtask's task
    runs in its worker; the other subtask continues warm in its host."""
    expected = cold_rows(statecore_home, 2)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    os.chown(host_address(JOB, "main", 0), NOBODY, NOBODY)
    rows, restore = run(statecore_home, events(2), job=JOB, checkpoint_id=2, runner=hosted_task)
    assert rows == expected[1]
    assert restore["warm_tasks"] == 1
    assert any("is not a socket of this user" in m for m in refused(caplog))


@contextlib.contextmanager
def fake_host(address: Path, reply: Any, uid: int = OWN) -> Iterator[None]:
    """A process of user ``uid`` listening at ``address`` that takes a task as a host would
    (its input until done) and sends ``reply(connection)``."""
    address.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # the child: bound as root, listening as ``uid`` (its peer credentials)
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(address))
            os.setgid(uid if uid != OWN else os.getgid())
            os.setuid(uid)
            sock.listen(8)
            while True:
                c, _ = sock.accept()
                connection = Connection(c.detach())
                header = connection.recv_bytes()
                if header[:1] == host.TASK:
                    connection.send_bytes(host.READY)
                with contextlib.suppress(EOFError, OSError):
                    while connection.recv_bytes() != host.DONE:
                        pass
                    reply(connection)
                connection.close()
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while not address.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # listening
        yield
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        address.unlink(missing_ok=True)


class RunsCode:
    """What a forged ``E`` reply carries: unpickling it creates ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (Path.touch, (self.path,))


def forged_error(marker: Path) -> Any:
    return lambda connection: connection.send_bytes(host.ERROR + pickle.dumps(RunsCode(marker)))


def test_host_security_a_host_of_another_user_is_refused_before_anything_is_sent(
    statecore_home: StatecoreConfig,
    host_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A socket served by another user's process (``SO_PEERCRED``) gets no task: the task runs
    in its worker; the forged reply it would send is never read."""
    marker = tmp_path / "ran"
    expected = cold_rows(statecore_home, 1)
    address = host_address(JOB, "main", 0)
    with fake_host(address, forged_error(marker), uid=NOBODY):
        rows, _ = run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    assert rows == expected[0]
    assert not marker.exists()
    assert any(f"is a process of user {NOBODY}" in m for m in refused(caplog))


def test_host_security_a_forged_error_reply_is_never_unpickled(
    statecore_home: StatecoreConfig, host_dir: Path, tmp_path: Path
) -> None:
    """An ``E`` reply is text: a pickle in it runs nothing, the task fails (nothing of it is
    committed), and the next run (a real host) completes with the right state."""
    marker = tmp_path / "ran"
    expected = cold_rows(statecore_home, 1)
    with fake_host(host_address(JOB, "main", 0), forged_error(marker)):
        with pytest.raises(HostReplyError, match="not an error's text"):
            run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    assert not marker.exists()
    rows, _ = run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    assert rows == expected[0]


def forged_report(path: str, subtask: int = 0, checkpoint: int = 1) -> Any:
    """A reply whose snapshot report names ``path`` (a file of the attacker's choosing)."""
    report = {
        "job": JOB,
        "operator": "main",
        "checkpoint_id": checkpoint,
        "subtask": subtask,
        "restore": {},
        "states": [
            {
                "state": "total",
                "schema": "",
                "descriptor": {},
                "changed_key_groups": [0],
                "files": [
                    {
                        "path": path,
                        "key_group": 0,
                        "rows": 1,
                        "size": 1,
                        "modification_time": 0,
                        "stats": "{}",
                    }
                ],
            }
        ],
    }
    schema = OUTPUT.append(pa.field(META, pa.string()))
    batch = pa.RecordBatch.from_pylist([{META: json.dumps(report)}], schema=schema)

    def reply(connection: Connection) -> None:
        connection.send_bytes(host.BATCH + host.to_ipc(batch))
        connection.send_bytes(host.DONE)

    return reply


@pytest.mark.parametrize(
    "path,subtask,checkpoint,why",
    [
        ("key_group=0/../../../../outside/evil.parquet", 0, 1, "the file"),
        ("/etc/evil.parquet", 0, 1, "the file"),
        ("key_group=0/cp-1-0-ok.parquet", 1, 1, "reported for"),
        ("key_group=0/cp-1-0-ok.parquet", 0, 7, "reported for"),
    ],
    ids=["outside", "absolute", "another-subtask", "another-checkpoint"],
)
def test_host_security_a_forged_report_is_refused_and_nothing_of_it_is_committed(
    statecore_home: StatecoreConfig,
    host_dir: Path,
    path: str,
    subtask: int,
    checkpoint: int,
    why: str,
) -> None:
    expected = cold_rows(statecore_home, 1)
    with fake_host(host_address(JOB, "main", 0), forged_report(path, subtask, checkpoint)):
        with pytest.raises(HostReplyError, match=why):
            run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    rows, _ = run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    assert rows == expected[0]


def host_pid(address: Path) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                if "statecore.spark.host_server" in cmdline and str(address) in cmdline:
                    return int(entry.name)
    raise AssertionError(f"no host at {address}")


def in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=body)
    thread.start()
    return thread, out


def test_warm_host_a_task_waiting_while_its_host_exits_is_taken_by_a_new_host(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    """A host asked to exit (by ``stop_hosts``, a rescale, an eviction) while a task waits in
    its socket's backlog: the task is taken by a new host (a cold restore), not failed."""
    expected = cold_rows(statecore_home, 2, parallelism=1)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, parallelism=1, runner=hosted_task)
    address = host_address(JOB, "main", 0)
    pid = host_pid(address)
    os.kill(pid, signal.SIGSTOP)  # both wait in the backlog: the exit first, then the task
    try:
        host._ask_to_exit(address)
        thread, out = in_thread(
            lambda: run(
                statecore_home,
                events(2),
                job=JOB,
                checkpoint_id=2,
                parallelism=1,
                runner=hosted_task,
            )
        )
        time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    thread.join(60)
    assert "error" not in out, out
    rows, restore = out["result"]
    assert rows == expected[1]
    assert restore["warm_tasks"] == 0  # a new host restored


def test_warm_host_an_idle_host_serves_the_task_already_waiting_before_it_exits(
    statecore_home: StatecoreConfig, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose idle time runs out while a task waits to be accepted serves that task
    (warm) before it exits, rather than ending under it."""
    monkeypatch.setenv("STATECORE_HOST_IDLE_SECONDS", "1")
    expected = cold_rows(statecore_home, 2, parallelism=1)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, parallelism=1, runner=hosted_task)
    pid = host_pid(host_address(JOB, "main", 0))
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # idle for longer than allowed, the task arrives while it is stopped
        thread, out = in_thread(
            lambda: run(
                statecore_home,
                events(2),
                job=JOB,
                checkpoint_id=2,
                parallelism=1,
                runner=hosted_task,
            )
        )
        time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    thread.join(60)
    assert "error" not in out, out
    rows, restore = out["result"]
    assert rows == expected[1]
    assert restore["warm_tasks"] == 1  # served by the host that kept the state


class Slow(Totals):
    """:class:`Totals`, sleeping ``seconds`` on its first record (a long task)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def process_element(self, value: Any, ctx: Any) -> Iterator[tuple[Any, ...]]:
        if self.seconds:
            time.sleep(self.seconds)
            self.seconds = 0
        yield from super().process_element(value, ctx)


def test_warm_host_a_host_running_a_long_task_is_not_evicted_as_idle(
    statecore_home: StatecoreConfig, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose task runs longer than the eviction's idle time, asked by another task's
    host start to make room, keeps its state: its subtask's next task continues warm."""
    monkeypatch.setattr(host, "EVICT_AFTER", 0.3)
    monkeypatch.setenv("STATECORE_MAX_HOSTS", "1")
    expected = cold_rows(statecore_home, 3, parallelism=1)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, parallelism=1, runner=hosted_task)
    time.sleep(0.5)
    timer = threading.Timer(0.8, host._evict, [host_address(JOB, "main", 0).parent])
    timer.start()  # while the next task runs (1.5 s)
    rows, _ = run(
        statecore_home,
        events(2),
        job=JOB,
        checkpoint_id=2,
        parallelism=1,
        runner=hosted_task,
        function=Slow(1.5),
    )
    timer.join()
    assert rows == expected[1]
    time.sleep(0.3)  # the host read the request after its task
    rows, restore = run(
        statecore_home, events(3), job=JOB, checkpoint_id=3, parallelism=1, runner=hosted_task
    )
    assert rows == expected[2]
    assert restore["warm_tasks"] == 1


class LoadsOnlyInWorkers(Totals):
    """A function whose copy cannot be loaded in a host (its module, say, is on the worker's
    path only): unpickling it raises there."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if os.environ.get(host.EXECUTOR_ENV):
            raise ModuleNotFoundError("No module named 'only_in_workers'")
        self.__dict__.update(state)


def test_warm_host_a_task_its_host_cannot_load_runs_in_its_worker_and_the_host_goes_on(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    expected = cold_rows(statecore_home, 3)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=hosted_task)
    rows, restore = run(
        statecore_home,
        events(2),
        job=JOB,
        checkpoint_id=2,
        runner=hosted_task,
        function=LoadsOnlyInWorkers(),
    )
    assert rows == expected[1]
    assert restore["warm_tasks"] == 0
    assert len(sockets(host_dir)) == 2  # the hosts did not end
    rows, _ = run(statecore_home, events(3), job=JOB, checkpoint_id=3, runner=hosted_task)
    assert rows == expected[2]


def test_warm_host_starts_with_statecore_shipped_by_py_files(
    tmp_path: Path, host_dir: Path
) -> None:
    """A worker whose statecore comes from ``--py-files`` (on its ``sys.path`` only, not
    installed) starts hosts that import it from there too."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    site = next(venv.glob("lib/python*/site-packages"))
    deps = sysconfig.get_paths()["purelib"]
    (site / "deps.pth").write_text(f"{deps}\n")  # pyspark, pyarrow...: not statecore
    shipped = tmp_path / "py-files"
    shutil.copytree(Path(host.__file__).parents[1], shipped / "statecore")
    script = f"""
import sys
sys.path.insert(0, {str(shipped)!r})  # as Spark adds a --py-files zip
import statecore.spark.host as host
address = host.host_address("shipped", "main", 0)
with host._connect(address) as connection:
    connection.send_bytes(host.EXIT)
print("connected")
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import statecore"],
        env=env,
        capture_output=True,
        cwd=tmp_path,
    )
    assert probe.returncode != 0, "statecore must not be installed in the worker's venv"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        env={**env, "STATECORE_HOST_DIR": str(host_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "connected" in done.stdout
