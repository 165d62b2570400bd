"""Where snapshot tables live (a local folder or S3), and the one place that turns the
environment into the settings of every reader and writer of them.

Every Delta table statecore opens or creates (:func:`open_table`, :func:`create_table`) and
every file it writes, reads, lists or deletes (:func:`table_filesystem`) gets its S3 settings
from :class:`S3Settings`, read from the environment each time (so a Spark task's worker uses
the environment Spark gave it): ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, and for an S3-compatible server ``AWS_ENDPOINT_URL``
(``http://`` only with ``AWS_ALLOW_HTTP=true``). Nothing else holds credentials: they are never
passed as arguments, stored in the catalog, or part of a URI or message.

>>> settings = S3Settings.from_env(
...     {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
...      "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"}
... )
>>> settings  # the credentials never show
S3Settings(region='us-east-1', endpoint_url='http://127.0.0.1:9000', allow_http=True, \
max_attempts=10, retry_timeout=datetime.timedelta(seconds=180))
>>> settings.delta_options()["AWS_ENDPOINT_URL"], settings.endpoint_host, settings.use_ssl
('http://127.0.0.1:9000', '127.0.0.1:9000', False)

**Throttling**: S3 answers ``503 SlowDown`` when a prefix gets more requests than it takes.
Every client statecore builds here retries it with exponential backoff and jitter, up to
``STATECORE_S3_MAX_ATTEMPTS`` attempts of one request (default 10) and, for delta-rs, within
``STATECORE_S3_RETRY_TIMEOUT`` seconds of the first (default 180): pyarrow's filesystem (the
AWS SDK's standard retry strategy), delta-rs (object_store's retries, ``max_retries`` and
``retry_timeout``) and DuckDB (``http_retries``, :mod:`statecore.query.sql`). A throttled
request was not applied, so retrying it is safe, also a commit's conditional put; statecore
retries nothing itself above the clients: a commit whose outcome is unknown fails the
checkpoint, which the next attempt rolls back (:mod:`statecore.snapshot.table`).
:func:`throttling_hint` names the setting in the error of a request throttled through
every attempt.

>>> S3Settings.from_env({"STATECORE_S3_MAX_ATTEMPTS": "5"}).delta_options()["max_retries"]
'4'

Concurrent commits are safe on S3 because delta-rs 1.x writes each commit file
``_delta_log/<version>.json`` with a conditional put (``If-None-Match: *``): of two writers
racing for one version, S3 accepts exactly one and the other sees a conflict. The S3 API
itself gives this guarantee (AWS S3 since 2024; an S3-compatible server must honour
``If-None-Match`` too); no lock table is needed, and the unsafe opt-out
``AWS_S3_ALLOW_UNSAFE_RENAME`` is refused (:class:`~statecore.errors.ConfigError`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, PostCommitHookProperties

from statecore.errors import ConfigError

__all__ = [
    "POST_COMMIT",
    "S3_SCHEMES",
    "TABLE_PROPERTIES",
    "TOMBSTONE_RETENTION",
    "S3Settings",
    "create_table",
    "is_s3",
    "open_table",
    "storage_options",
    "table_filesystem",
    "throttling_hint",
]

TOMBSTONE_RETENTION = timedelta(hours=1)
"""How long a Delta log checkpoint keeps the ``remove`` actions (tombstones) of files commits
replaced: ``delta.deletedFileRetentionDuration``, 7 days by Delta's default. Every statecore
commit replaces the files of the key groups it wrote, so with 7 days each log checkpoint of a
stream's state table carried every tombstone of the last week (about 4 per micro-batch:
38,000 after the 10,000-micro-batch soak, whose tables took 4 times as long to open at its end
as at its start). Only another tool's VACUUM reads them (its default retention is this
duration); statecore's VACUUM (:func:`statecore.snapshot.rewrite.vacuum`) lists the table's
files and keeps every file a retained version references, and readers of older versions read
those versions' own log. One hour, as the log's grace
(:data:`statecore.snapshot.log.LOG_GRACE`)."""

TABLE_PROPERTIES = {
    "delta.enableExpiredLogCleanup": "false",
    "delta.deletedFileRetentionDuration": (
        f"interval {int(TOMBSTONE_RETENTION.total_seconds())} seconds"
    ),
}
"""The properties of every table statecore creates. Delta writers (delta-rs's post-commit
hook, Spark's Delta) delete ``_delta_log`` entries older than ``delta.logRetentionDuration``
(30 days) by age alone, below a log checkpoint, unless ``delta.enableExpiredLogCleanup`` is
``false``: that would remove entries a retained checkpoint still needs to open its version.
statecore cuts its logs itself, to the versions the catalog names
(:func:`statecore.snapshot.log.cleanup_log`). Log checkpoints keep tombstones for
:data:`TOMBSTONE_RETENTION`. Delta has no property to turn it off, so another tool's VACUUM
of a statecore table (Spark's ``VACUUM``, delta-rs's ``vacuum()``) would delete files
retained checkpoints need: ``statecore retention`` is these tables' VACUUM."""

POST_COMMIT = PostCommitHookProperties(cleanup_expired_logs=False)
"""The post-commit hook of every statecore commit: log checkpoints as delta-rs writes them, no
log cleanup by age, also in a table created before :data:`TABLE_PROPERTIES` (whose property
is unset, so ``true``)."""

S3_SCHEMES = ("s3://", "s3a://")
DEFAULT_REGION = "us-east-1"
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_RETRY_TIMEOUT = timedelta(minutes=3)
_UNSAFE = "AWS_S3_ALLOW_UNSAFE_RENAME"
_MAX_ATTEMPTS = "STATECORE_S3_MAX_ATTEMPTS"
_RETRY_TIMEOUT = "STATECORE_S3_RETRY_TIMEOUT"
_THROTTLED = ("SlowDown", "SLOW_DOWN", "HTTP status 503", "HTTP 503", "503 Service Unavailable")


def is_s3(uri: str) -> bool:
    """Whether ``uri`` names an S3 location."""
    return uri.startswith(S3_SCHEMES)


@dataclass(frozen=True, kw_only=True)
class S3Settings:
    """The S3 settings of this process, from its environment (credentials kept out of
    ``repr``)."""

    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str = DEFAULT_REGION
    endpoint_url: str | None = None
    allow_http: bool = False
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts of one request that S3 throttles (``503 SlowDown``) or fails transiently."""
    retry_timeout: timedelta = DEFAULT_RETRY_TIMEOUT
    """delta-rs retries a request no longer than this after its first attempt."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.retry_timeout <= timedelta(0):
            raise ConfigError(
                f"{_MAX_ATTEMPTS} must be at least 1 and {_RETRY_TIMEOUT} positive, not "
                f"{self.max_attempts} and {self.retry_timeout.total_seconds()} seconds"
            )
        if self.endpoint_url is not None:
            parts = urlsplit(self.endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(
                    f"AWS_ENDPOINT_URL {self.endpoint_url!r} is not an http(s):// URL"
                )
            if parts.scheme == "http" and not self.allow_http:
                raise ConfigError(
                    f"AWS_ENDPOINT_URL {self.endpoint_url!r} is plain http: set "
                    "AWS_ALLOW_HTTP=true to use it"
                )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        """The settings of ``env`` (default: this process's environment)."""
        env = os.environ if env is None else env
        if env.get(_UNSAFE, "").strip().lower() in ("1", "true", "yes"):
            raise ConfigError(
                f"{_UNSAFE} is set: statecore commits to S3 only with conditional puts, so "
                "that two writers of one table version cannot both succeed; unset it"
            )
        return cls(
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            endpoint_url=(env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None),
            allow_http=env.get("AWS_ALLOW_HTTP", "").strip().lower() in ("1", "true", "yes"),
            max_attempts=int(_number(env, _MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS)),
            retry_timeout=timedelta(
                seconds=_number(env, _RETRY_TIMEOUT, DEFAULT_RETRY_TIMEOUT.total_seconds())
            ),
        )

    def delta_options(self) -> dict[str, str]:
        """delta-rs's ``storage_options``."""
        options = {"AWS_REGION": self.region}
        if self.access_key_id and self.secret_access_key:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        if self.session_token:
            options["AWS_SESSION_TOKEN"] = self.session_token
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.allow_http:
            options["AWS_ALLOW_HTTP"] = "true"
        options["max_retries"] = str(self.max_attempts - 1)
        options["retry_timeout"] = f"{max(1, round(self.retry_timeout.total_seconds()))}s"
        return options

    @property
    def endpoint_host(self) -> str | None:
        """``host:port`` of the endpoint (as DuckDB's S3 secret takes it), ``None`` for AWS."""
        return urlsplit(self.endpoint_url).netloc if self.endpoint_url else None

    @property
    def use_ssl(self) -> bool:
        return not (self.endpoint_url or "").startswith("http://")

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow S3 filesystem with these settings (one per process and settings)."""
        return _s3_filesystem(self)


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        return float(text) if name == _RETRY_TIMEOUT else int(text)
    except ValueError as exc:
        raise ConfigError(f"{name} {text!r} is not a number") from exc


def throttling_hint(exc: BaseException) -> str:
    """What to say after an error whose S3 request was throttled through every attempt (``""``
    for another error)."""
    text = str(exc)
    if not any(marker in text for marker in _THROTTLED):
        return ""
    settings = S3Settings.from_env()
    return (
        f" (S3 kept answering 503 SlowDown through {settings.max_attempts} attempts with "
        f"backoff: retry later, or raise {_MAX_ATTEMPTS} or {_RETRY_TIMEOUT})"
    )


@functools.lru_cache(maxsize=8)
def _s3_filesystem(settings: S3Settings) -> pafs.FileSystem:
    kwargs: dict[str, Any] = {
        "region": settings.region,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts),
    }
    if settings.access_key_id and settings.secret_access_key:
        kwargs.update(access_key=settings.access_key_id, secret_key=settings.secret_access_key)
        if settings.session_token:
            kwargs["session_token"] = settings.session_token
    if settings.endpoint_url:
        parts = urlsplit(settings.endpoint_url)
        kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme)
    return pafs.S3FileSystem(**kwargs)


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs's ``storage_options`` for the table at ``uri`` (``None`` off S3)."""
    return S3Settings.from_env().delta_options() if is_s3(uri) else None


def table_filesystem(table_uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of a table URI (a local path, ``s3://bucket/...``, or
    another URI pyarrow knows)."""
    if "://" not in table_uri:
        return pafs.LocalFileSystem(), table_uri
    if is_s3(table_uri):
        return S3Settings.from_env().filesystem(), table_uri.split("://", 1)[1].rstrip("/")
    fs, path = pafs.FileSystem.from_uri(table_uri)
    return fs, str(path)


def open_table(uri: str, version: int | None = None) -> DeltaTable:
    """The Delta table at ``uri`` (at ``version``, or its latest)."""
    return DeltaTable(uri, version=version, storage_options=storage_options(uri))


def create_table(uri: str, schema: pa.Schema, **kwargs: Any) -> DeltaTable:
    """``DeltaTable.create`` at ``uri``, with the storage settings and
    :data:`TABLE_PROPERTIES`."""
    return DeltaTable.create(
        uri,
        schema,
        storage_options=storage_options(uri),
        configuration=TABLE_PROPERTIES,
        post_commithook_properties=POST_COMMIT,
        **kwargs,
    )
