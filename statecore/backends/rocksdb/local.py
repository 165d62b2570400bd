"""Task-local RocksDB directories, and when one may be reused instead of restored from Delta.

Layout: ``<root>/<job>/<operator>/kg-<start>-<end>/`` holds the instance (``db/``) of the task
that owns key groups ``start..end``, and ``statecore-manifest.json`` when the instance is at
rest. The manifest names the checkpoint the instance reflects and, per state and key group,
the exact snapshot files that checkpoint consists of. It is written by the task only after its
snapshot files are written and the database is closed, and it is deleted before a task opens
the database again, so a directory with a manifest is never in use and never half-written.

A later task reuses a directory only when the checkpoint it restores is the manifest's
checkpoint *and* the restore plan lists exactly the manifest's files for every key group they
share. The task writes its manifest before the driver completes the checkpoint; if that
checkpoint then fails, or another attempt's files are committed, or the catalog is replaced,
the files differ and the directory is restored from Delta instead.

After a rescale, the directory with the largest overlap is taken over (renamed to the new
range); the backend clips the key groups it no longer owns and ingests the ones it lacks.
Claims are serialized per operator with a lock file; an instance directory is locked for as
long as a task uses it, so two attempts of one task never share it. A Python worker that keeps
an instance open for its next task (:mod:`statecore.runtime.warm`) holds that lock too: a task
of another worker that finds it locked asks for it (a ``<dir>.wanted`` file, see
:meth:`LocalInstance.release_requested`) and waits up to ``RELEASE_WAIT`` seconds for the keeper
to close and publish it. Idle directories at
another checkpoint (or without a manifest: an interrupted run) are removed when claiming.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from statecore.backends.scope import RestoredFiles
from statecore.config import check_name
from statecore.keygroups import KeyGroupRange

__all__ = ["LocalManifest", "LocalInstance", "MANIFEST_NAME", "FORMAT_VERSION", "RELEASE_WAIT"]

log = logging.getLogger(__name__)

MANIFEST_NAME = "statecore-manifest.json"
KEPT_MANIFEST_NAME = "statecore-manifest.kept.json"
"""The manifest of an instance a Python worker keeps open for its next run (the instance is in
use: another task may ask for it, and reuses it only after it was closed and published)."""
FORMAT_VERSION = 1
RELEASE_WAIT = 2.0
"""Seconds a task waits for a locked instance directory to be released by a worker that keeps
it open for its next task (a directory used by a running attempt is not released)."""


@dataclass(frozen=True, kw_only=True)
class LocalManifest:
    """Which checkpoint a local instance reflects, and the files that checkpoint is made of."""

    job: str
    operator: str
    max_parallelism: int
    key_groups: KeyGroupRange
    checkpoint_id: int
    files: RestoredFiles
    schemas: Mapping[str, str] = field(default_factory=dict)
    """The stored schema of each state (a state whose schema changed is restored anew)."""
    format: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": self.format,
                "job": self.job,
                "operator": self.operator,
                "max_parallelism": self.max_parallelism,
                "key_groups": [self.key_groups.start, self.key_groups.end],
                "checkpoint_id": self.checkpoint_id,
                "files": {
                    state: {str(kg): list(paths) for kg, paths in sorted(by_kg.items())}
                    for state, by_kg in sorted(self.files.items())
                },
                "schemas": dict(sorted(self.schemas.items())),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> LocalManifest:
        data: dict[str, Any] = json.loads(text)
        return cls(
            format=int(data["format"]),
            job=str(data["job"]),
            operator=str(data["operator"]),
            max_parallelism=int(data["max_parallelism"]),
            key_groups=KeyGroupRange(*(int(x) for x in data["key_groups"])),
            checkpoint_id=int(data["checkpoint_id"]),
            files={
                state: {int(kg): tuple(paths) for kg, paths in by_kg.items()}
                for state, by_kg in data["files"].items()
            },
            schemas={str(k): str(v) for k, v in data.get("schemas", {}).items()},
        )

    def matches(
        self,
        *,
        job: str,
        operator: str,
        max_parallelism: int,
        checkpoint_id: int,
        key_groups: KeyGroupRange,
        files: RestoredFiles,
    ) -> bool:
        """Whether every state of this instance is exactly ``checkpoint_id``'s files for the
        shared key groups."""
        if (self.format, self.job, self.operator, self.max_parallelism, self.checkpoint_id) != (
            FORMAT_VERSION,
            job,
            operator,
            max_parallelism,
            checkpoint_id,
        ):
            return False
        shared = self.key_groups.intersection(key_groups)
        for state in self.files:  # a state the instance lacks is restored from the files
            mine = self.files.get(state, {})
            theirs = files.get(state, {})
            for kg in shared:
                if tuple(sorted(mine.get(kg, ()))) != tuple(sorted(theirs.get(kg, ()))):
                    return False
        return True


class _FileLock:
    def __init__(self, path: Path, *, blocking: bool) -> None:
        self.path = path
        self._file: IO[str] | None = open(path, "a")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError:
            self._file.close()
            self._file = None
            raise

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class LocalInstance:
    """The directory one task's RocksDB instance lives in (see the module docstring)."""

    def __init__(
        self, path: Path, *, lock: _FileLock | None, ephemeral: bool, reused: LocalManifest | None
    ) -> None:
        self.path = path
        self.db_path = path / "db"
        self.ingest_path = path / "ingest"
        self._lock = lock
        self.ephemeral = ephemeral
        self.reused = reused

    @classmethod
    def temporary(cls, parent: str | None = None) -> LocalInstance:
        """A fresh directory removed on release (no reuse)."""
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="statecore-rocksdb-", dir=parent))
        return cls(path, lock=None, ephemeral=True, reused=None)

    @classmethod
    def claim(
        cls,
        root: str,
        *,
        job: str,
        operator: str,
        key_groups: KeyGroupRange,
        max_parallelism: int,
        restored_checkpoint_id: int | None,
        restored_files: RestoredFiles,
    ) -> LocalInstance:
        """This task's directory: a matching instance when there is one, else an empty one."""
        base = Path(root) / _safe(check_name("job", job)) / _safe(check_name("operator", operator))
        base.mkdir(parents=True, exist_ok=True)
        name = f"kg-{key_groups.start}-{key_groups.end}"
        mine = base / name
        lock = _acquire_or_ask(base, name)
        if lock is None:
            log.warning(
                "local RocksDB directory %s is in use by another attempt; using a temporary one",
                mine,
            )
            return cls.temporary(str(Path(root) / ".tmp"))
        claims = _FileLock(base / ".claims.lock", blocking=True)
        try:
            _sweep(base, mine, restored_checkpoint_id)
            reused = None
            if restored_checkpoint_id is not None:
                reused = _take_matching(
                    base,
                    mine,
                    job=job,
                    operator=operator,
                    key_groups=key_groups,
                    max_parallelism=max_parallelism,
                    checkpoint_id=restored_checkpoint_id,
                    files=restored_files,
                )
            if reused is None and mine.exists():
                shutil.rmtree(mine)
            mine.mkdir(parents=True, exist_ok=True)
        except BaseException:
            lock.release()
            raise
        finally:
            claims.release()
        return cls(mine, lock=lock, ephemeral=False, reused=reused)

    def publish(self, manifest: LocalManifest) -> None:
        """Record that the (closed) instance reflects ``manifest``'s checkpoint."""
        if self.ephemeral:
            return
        tmp = self.path / f".{MANIFEST_NAME}.tmp"
        tmp.write_text(manifest.to_json())
        os.replace(tmp, self.path / MANIFEST_NAME)

    def publish_kept(self, manifest: LocalManifest) -> None:
        """Say which checkpoint the instance, kept open, is at (see :data:`KEPT_MANIFEST_NAME`)."""
        if self.ephemeral:
            return
        tmp = self.path / f".{KEPT_MANIFEST_NAME}.tmp"
        tmp.write_text(manifest.to_json())
        os.replace(tmp, self.path / KEPT_MANIFEST_NAME)

    def withdraw_kept(self) -> None:
        if not self.ephemeral:
            (self.path / KEPT_MANIFEST_NAME).unlink(missing_ok=True)

    def release_requested(self) -> bool:
        """Whether a task of another process waits for this directory (its holder, keeping it
        open between runs, then closes it)."""
        return not self.ephemeral and self.path.with_name(self.path.name + ".wanted").exists()

    def release(self) -> None:
        """Unlock the directory (and delete it when it is temporary)."""
        if self.ephemeral:
            shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _acquire_or_ask(base: Path, name: str) -> _FileLock | None:
    """The lock of directory ``name``; when held, asked for (``<name>.wanted``) and waited for
    up to ``RELEASE_WAIT`` seconds; ``None`` when it stays held."""
    path = base / f"{name}.lock"
    try:
        return _FileLock(path, blocking=False)
    except OSError:
        pass
    wanted = base / f"{name}.wanted"
    wanted.touch()
    deadline = time.monotonic() + RELEASE_WAIT
    try:
        while time.monotonic() < deadline:
            time.sleep(0.01)
            try:
                return _FileLock(path, blocking=False)
            except OSError:
                continue
        return None
    finally:
        wanted.unlink(missing_ok=True)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "_"


def _read_manifest(directory: Path, name: str = MANIFEST_NAME) -> LocalManifest | None:
    try:
        return LocalManifest.from_json((directory / name).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sweep(base: Path, mine: Path, checkpoint_id: int | None) -> None:
    """Remove idle instances that no task of this run can reuse (another checkpoint, or none)."""
    for directory in base.iterdir():
        if not directory.is_dir() or directory == mine:
            continue
        manifest = _read_manifest(directory)
        if manifest is not None and manifest.checkpoint_id == checkpoint_id:
            continue
        try:
            idle = _FileLock(base / f"{directory.name}.lock", blocking=False)
        except OSError:
            continue
        try:
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            idle.release()


def _take_matching(
    base: Path,
    mine: Path,
    *,
    job: str,
    operator: str,
    key_groups: KeyGroupRange,
    max_parallelism: int,
    checkpoint_id: int,
    files: RestoredFiles,
) -> LocalManifest | None:
    """Move the best matching instance to ``mine`` and un-publish it; its manifest."""
    candidates = []
    for directory in base.iterdir():
        if not directory.is_dir():
            continue
        manifest = _read_manifest(directory) or _read_manifest(directory, KEPT_MANIFEST_NAME)
        if manifest is None:
            continue
        overlap = len(manifest.key_groups.intersection(key_groups))
        if overlap and manifest.matches(
            job=job,
            operator=operator,
            max_parallelism=max_parallelism,
            checkpoint_id=checkpoint_id,
            key_groups=key_groups,
            files=files,
        ):
            candidates.append((overlap, directory == mine, directory, manifest))
    for _, _, directory, manifest in sorted(candidates, key=lambda c: (c[0], c[1]), reverse=True):
        other_lock = None
        if directory != mine:
            other_lock = _acquire_or_ask(base, directory.name)
            if other_lock is None:
                continue
        try:
            published = _read_manifest(directory)  # a kept instance publishes when released
            if published != manifest:
                continue
            if directory != mine:
                if mine.exists():
                    shutil.rmtree(mine)
                directory.rename(mine)
            (mine / MANIFEST_NAME).unlink()
        except FileNotFoundError:
            continue
        finally:
            if other_lock is not None:
                other_lock.release()
        return manifest
    return None
