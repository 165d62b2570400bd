"""One configuration object, resolved from arguments, environment, a config file, then defaults.

The home is found as git finds a repository: ``STATECORE_HOME`` (or the ``home`` argument), else
the nearest ``.statecore`` folder in the current folder or one of its parents, else
``~/.statecore`` (:func:`find_home`).

Order (first wins): explicit arguments, the environment (``STATECORE_HOME``,
``STATECORE_CATALOG_URL``, ``STATECORE_WAREHOUSE``, ``STATECORE_LEASE_TIMEOUT`` and
``STATECORE_LEASE_WAIT`` in seconds, ``STATECORE_LATENCY_SAMPLE_INTERVAL`` and
``STATECORE_LATENCY_HISTORY_SIZE``), the TOML file named by ``STATECORE_CONFIG`` (default
``<home>/statecore.toml``), then the embedded, local defaults. The S3 settings (credentials,
endpoint, and the retry budget of throttled requests, ``STATECORE_S3_MAX_ATTEMPTS`` and
``STATECORE_S3_RETRY_TIMEOUT``) are not part of it: every process, a Spark executor's too, reads
them from its own environment (:mod:`statecore.snapshot.storage`):

>>> cfg = StatecoreConfig.resolve(home="/tmp/sc", env={})
>>> cfg.catalog_url
'sqlite:////tmp/sc/catalog.db'
>>> cfg.warehouse
'/tmp/sc/warehouse'
>>> cfg.lease_timeout
datetime.timedelta(seconds=60)
>>> cfg.lease_wait  # a writer finding the job held is refused at once unless asked to wait
datetime.timedelta(0)
>>> cfg.latency_sample_interval  # latency tracking is off unless asked for, as in Flink
0

Names that become folders of the warehouse and the local state directory (jobs, operators,
savepoints: ``<warehouse>/<job>/<operator>/...``, ``_savepoints/<job>/<name>``) are 1 to 200
letters, digits, ``.``, ``_`` or ``-`` starting with a letter or digit, so each is one path
segment and never ``..`` nor a hidden or reserved folder (``_savepoints``, ``_delta_log``); a
state name is a Python identifier, as its descriptor requires:

>>> check_name("job", "clickstream-v2.1")
'clickstream-v2.1'
>>> check_name("job", "../../x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
statecore.errors.ConfigError: job name '../../x': use 1 to 200 letters, digits, ...
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from statecore.errors import ConfigError

__all__ = [
    "DEFAULT_LEASE_TIMEOUT",
    "HOME_FOLDER",
    "StatecoreConfig",
    "check_name",
    "check_state_name",
    "find_home",
    "homes_tried",
]

_KEYS = ("home", "catalog_url", "warehouse")
_LATENCY_KEYS = ("latency_sample_interval", "latency_history_size")
_FILE_KEYS = (*_KEYS, "lease_timeout", "lease_wait", *_LATENCY_KEYS)

DEFAULT_LEASE_TIMEOUT = timedelta(seconds=60)
HOME_FOLDER = ".statecore"


def find_home(*, cwd: Path | None = None, user_home: Path | None = None) -> Path:
    """The home when ``STATECORE_HOME`` is not set: the nearest ``.statecore`` folder in ``cwd``
    or one of its parents, else ``~/.statecore`` (which may not exist yet).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / ".statecore").mkdir(); (root / "a" / "b").mkdir(parents=True)
    >>> find_home(cwd=root / "a" / "b", user_home=root / "u") == root / ".statecore"
    True
    >>> elsewhere = Path(tempfile.mkdtemp())
    >>> find_home(cwd=elsewhere, user_home=root / "u") == root / "u" / ".statecore"
    True
    """
    here = (cwd or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / HOME_FOLDER).is_dir():
            return folder / HOME_FOLDER
    return (user_home or Path.home()) / HOME_FOLDER


def homes_tried(*, cwd: Path | None = None, user_home: Path | None = None) -> str:
    """Where :func:`find_home` looks, for an error message."""
    here = (cwd or Path.cwd()).absolute()
    return (
        f"STATECORE_HOME (not set), {here / HOME_FOLDER} and a {HOME_FOLDER} folder in each "
        f"parent folder, {(user_home or Path.home()) / HOME_FOLDER}"
    )


@dataclass(frozen=True, kw_only=True)
class StatecoreConfig:
    """Where statecore keeps its catalog and its Delta tables, how long a job's lease lasts
    without renewal (a writer that stops renewing is taken over after ``lease_timeout``), how
    long a run or maintenance operation that finds the job held waits for it (``lease_wait``;
    0: refused at once), and
    state-access latency tracking: every ``latency_sample_interval``-th record's state accesses
    are timed, the last ``latency_history_size`` samples kept per state and access (Flink's
    ``state.latency-track.sample-interval`` 100 and ``history-size`` 128; 0 turns it off)."""

    home: str
    catalog_url: str
    warehouse: str
    lease_timeout: timedelta = DEFAULT_LEASE_TIMEOUT
    lease_wait: timedelta = timedelta(0)
    latency_sample_interval: int = 0
    latency_history_size: int = 128

    def __post_init__(self) -> None:
        for key in _KEYS:
            if not getattr(self, key):
                raise ConfigError(f"statecore config: {key} must not be empty")
        if "://" not in self.catalog_url:
            raise ConfigError(
                f"statecore config: catalog_url {self.catalog_url!r} is not a SQLAlchemy URL "
                "(e.g. sqlite:///path/catalog.db or postgresql+psycopg2://host/db)"
            )
        if self.lease_timeout <= timedelta(0):
            raise ConfigError(
                f"statecore config: lease_timeout must be positive, not {self.lease_timeout}"
            )
        if self.lease_wait < timedelta(0):
            raise ConfigError(
                f"statecore config: lease_wait must not be negative, not {self.lease_wait}"
            )
        if self.latency_sample_interval < 0 or self.latency_history_size < 1:
            raise ConfigError(
                "statecore config: latency_sample_interval must be 0 (off) or positive and "
                f"latency_history_size positive, not {self.latency_sample_interval} and "
                f"{self.latency_history_size}"
            )

    @classmethod
    def resolve(
        cls,
        *,
        home: str | None = None,
        catalog_url: str | None = None,
        warehouse: str | None = None,
        lease_timeout: timedelta | None = None,
        lease_wait: timedelta | None = None,
        latency_sample_interval: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> StatecoreConfig:
        """Resolve the configuration: arguments, then environment, then file, then defaults."""
        env = os.environ if env is None else env
        args = {"home": home, "catalog_url": catalog_url, "warehouse": warehouse}
        from_env = {
            "home": env.get("STATECORE_HOME"),
            "catalog_url": env.get("STATECORE_CATALOG_URL"),
            "warehouse": env.get("STATECORE_WAREHOUSE"),
        }
        given_home = args["home"] or from_env["home"]
        home_path = Path(given_home).absolute() if given_home else find_home()
        from_file = _read_file(Path(env.get("STATECORE_CONFIG") or home_path / "statecore.toml"))
        values: dict[str, str] = {"home": str(home_path)}
        defaults = {
            "catalog_url": f"sqlite:///{home_path / 'catalog.db'}",
            "warehouse": str(home_path / "warehouse"),
        }
        for key in ("catalog_url", "warehouse"):
            values[key] = args[key] or from_env[key] or from_file.get(key) or defaults[key]
        seconds = env.get("STATECORE_LEASE_TIMEOUT") or from_file.get("lease_timeout")
        if lease_timeout is None and seconds:
            lease_timeout = _seconds("lease_timeout", seconds)
        seconds = env.get("STATECORE_LEASE_WAIT") or from_file.get("lease_wait")
        if lease_wait is None and seconds:
            lease_wait = _seconds("lease_wait", seconds)
        latency = {
            key: _count(key, text)
            for key in _LATENCY_KEYS
            if (text := env.get(f"STATECORE_{key.upper()}") or from_file.get(key))
        }
        if latency_sample_interval is not None:
            latency["latency_sample_interval"] = latency_sample_interval
        return cls(
            home=values["home"],
            catalog_url=values["catalog_url"],
            warehouse=values["warehouse"],
            lease_timeout=lease_timeout or DEFAULT_LEASE_TIMEOUT,
            lease_wait=timedelta(0) if lease_wait is None else lease_wait,
            latency_sample_interval=latency.get("latency_sample_interval", 0),
            latency_history_size=latency.get("latency_history_size", 128),
        )


def _count(key: str, text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise ConfigError(f"statecore config: {key} {text!r} is not a whole number") from exc


def _seconds(key: str, text: str) -> timedelta:
    try:
        return timedelta(seconds=float(text))
    except (ValueError, OverflowError) as exc:
        raise ConfigError(f"statecore config: {key} {text!r} is not seconds") from exc


def _read_file(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"statecore config file {path} cannot be read: {exc}") from exc
    section = data.get("statecore", data)
    unknown = set(section) - set(_FILE_KEYS)
    if unknown:
        raise ConfigError(f"statecore config file {path}: unknown keys {sorted(unknown)}")
    return {k: str(v) for k, v in section.items()}


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_name(what: str, name: str) -> str:
    """``name`` if it is a valid ``what`` (job, operator, savepoint) name, else
    :class:`~statecore.errors.ConfigError` naming it."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{what} name {name!r}: use 1 to 200 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit"
        )
    return name


def check_state_name(name: str, *, where: str = "") -> str:
    """``name`` if it is a valid state name (a Python identifier), else ``ConfigError``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"state name {name!r}{where} must be a Python identifier")
    return name
