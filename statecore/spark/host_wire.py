"""What a warm state host (:mod:`statecore.spark.host`) and a task trust of each other.

Only the job's own user reaches a host, and nothing either side could forge runs as code:

- **The folder.** Hosts live in a folder of their user, made with ``mkdir`` (which never
  follows a link) and opened with ``O_NOFOLLOW | O_DIRECTORY`` at *every* connection and host
  start: a symbolic link, a folder of another owner, or one others may enter (mode other than
  ``0700``) is refused (:class:`WarmHostRefusedError`); the executor's folder is opened
  relative to that open folder, so a link planted between the two checks is refused too.
- **The socket.** It must be a socket of this user (``lstat``), and both ends check the other's
  user id (``SO_PEERCRED``): a task talks only to a host of its own user, and a host runs only
  tasks of its own user (and unpickles nothing before that check).
- **The replies.** A task unpickles nothing a host sends. Results are Arrow batches of the
  task's own result schema; the snapshot report among them must be the task's own (job,
  operator, subtask, checkpoint) and name only files inside its own tables' key-group
  partitions and, for output, files of its own checkpoint (:func:`check_report`). An error
  comes back as text (type, message, traceback, cause: :func:`error_text`) and is raised in
  the worker as an exception of the same type when the type is a builtin one or a class of a
  module the worker already imported, rebuilt from its arguments (when JSON carries them) or
  its message, showing the same message, and as a
  :class:`HostTaskError` naming it otherwise; the host's traceback is a note of it
  (:func:`error_from_text`).

A refused folder or socket makes the task run in its Python worker and restore cold, as with
warm hosts off; a reply that breaks these rules fails the task (:class:`HostReplyError`):
what it names is never committed.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import posixpath
import re
import socket
import stat
import struct
import sys
import traceback
from collections.abc import Container
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from statecore.errors import ConfigError, StateError

__all__ = [
    "HostReplyError",
    "HostTaskError",
    "WarmHostRefusedError",
    "check_report",
    "connect",
    "error_from_text",
    "error_text",
    "listen",
    "accept",
    "private_folder",
]

log = logging.getLogger(__name__)

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CRED = struct.calcsize("3i")
_PARTITION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=(-?\d+)$")
_OUTPUT_FILE = re.compile(r"^part-cp\d{12}-\d{5}-[0-9a-f]+\.parquet$")
_MAX_CAUSES = 8


class WarmHostRefusedError(ConfigError):
    """A hosts' folder or socket that another user could use or own: the task runs in its
    worker instead (a cold restore)."""


class HostReplyError(StateError):
    """A reply of a host that is not the task's own result (forged, or of another protocol)."""


class HostTaskError(RuntimeError):
    """An error of a task in its host whose type cannot be rebuilt in the worker: its type's
    name (``type_name``), message and the host's traceback (``host_traceback``)."""

    def __init__(self, type_name: str, message: str, host_traceback: str = "") -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.host_traceback = host_traceback


def private_folder(root: Path, executor: int) -> Path:
    """The folder of ``executor``'s hosts in ``root``, both made private to this user when
    missing and checked (never through a link) at every call."""
    root.parent.mkdir(parents=True, exist_ok=True)  # the base (a temporary folder): not ours
    fd = _private_dir(root, None)
    try:
        os.close(_private_dir(root / str(executor), fd))
    finally:
        os.close(fd)
    return root / str(executor)


def _private_dir(path: Path, parent: int | None) -> int:
    """An open descriptor of the folder ``path`` (relative to the open folder ``parent`` when
    given), made ``0700`` when missing; refused unless a folder (no link) of this user that
    nobody else may enter."""
    where = path.name if parent is not None else str(path)
    try:
        os.mkdir(where, 0o700, dir_fd=parent)  # an existing link is EEXIST, never followed
    except FileExistsError:
        pass
    try:
        fd = os.open(where, _DIRECTORY, dir_fd=parent)
    except OSError as exc:  # ELOOP: a symbolic link; ENOTDIR: not a folder
        raise WarmHostRefusedError(
            f"warm state hosts: {path} is not a folder (a symbolic link, or a file: "
            f"{exc.strerror}); remove it or set STATECORE_HOST_DIR"
        ) from None
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        os.close(fd)
        raise WarmHostRefusedError(
            f"warm state hosts: {path} must be a folder only this user may use (owner "
            f"{info.st_uid}, this user {os.getuid()}, mode {stat.S_IMODE(info.st_mode):o}); "
            "remove it or set STATECORE_HOST_DIR"
        )
    return fd


def _check_peer(sock: socket.socket, what: str) -> None:
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED))
    if uid != os.getuid():
        raise WarmHostRefusedError(
            f"warm state hosts: {what} is a process of user {uid} (pid {pid}), not of this "
            f"user {os.getuid()}: refused"
        )


def connect(address: Path) -> Connection:
    """A connection to the host listening at ``address``: a socket of this user, served by a
    process of this user. ``FileNotFoundError`` or ``ConnectionRefusedError``: none listens."""
    private_folder(address.parent.parent, int(address.parent.name))
    info = os.lstat(address)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise WarmHostRefusedError(
            f"warm state hosts: {address} is not a socket of this user (owner {info.st_uid}, "
            f"this user {os.getuid()}): refused"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(address))
        _check_peer(sock, f"the host at {address}")
    except BaseException:
        sock.close()
        raise
    return Connection(sock.detach())


def listen(address: Path) -> socket.socket:
    """The listening socket of a host at ``address`` (in a folder :func:`private_folder`
    checked), private to this user."""
    private_folder(address.parent.parent, int(address.parent.name))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(address))
    os.chmod(address, 0o600)
    sock.listen(64)
    return sock


def accept(listener: socket.socket) -> Connection | None:
    """The next connection to ``listener`` from a process of this user (``None``: one of
    another user, refused and logged)."""
    sock, _ = listener.accept()
    sock.setblocking(True)
    try:
        _check_peer(sock, "a connecting process")
    except WarmHostRefusedError as exc:
        log.error("%s", exc)
        sock.close()
        return None
    return Connection(sock.detach())


def error_text(exc: BaseException) -> bytes:
    """``exc`` as text (JSON): type, message, traceback and, in turn, its cause."""
    described: dict[str, Any] = {}
    level, current = described, exc
    for _ in range(_MAX_CAUSES):
        level.update(
            type=f"{type(current).__module__}.{type(current).__qualname__}",
            message=str(current),
            args=_plain(current.args),
            traceback="".join(traceback.format_exception(current, chain=False)),
        )
        nxt = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
        if nxt is None:
            break
        level["cause"] = level = {}
        current = nxt
    return json.dumps(described).encode()


def _plain(args: tuple[Any, ...]) -> list[Any] | None:
    """``args`` when JSON carries them exactly (to rebuild the exception from), else ``None``."""
    try:
        return list(args) if json.loads(json.dumps(list(args))) == list(args) else None
    except (TypeError, ValueError):
        return None


def error_from_text(body: bytes, where: str) -> BaseException:
    """The exception :func:`error_text` described, rebuilt without running anything the text
    names but a builtin or an already imported exception class's constructor (``where``: the
    host's log, named in the note)."""
    try:
        described = json.loads(body)
    except ValueError:
        return HostReplyError(f"{where}: an error reply that is not an error's text")
    error = _rebuilt(described, where)
    cause: BaseException | None = error
    level = described
    for _ in range(_MAX_CAUSES):
        level = level.get("cause") if isinstance(level, dict) else None
        if not isinstance(level, dict) or cause is None:
            break
        nxt = _rebuilt(level, where)
        cause.__cause__, cause = nxt, nxt
    return error


def _rebuilt(described: Any, where: str) -> BaseException:
    if not isinstance(described, dict):
        return HostReplyError(f"{where}: an error reply that is not an error's text")
    name, message = str(described.get("type", "")), str(described.get("message", ""))
    host_traceback = str(described.get("traceback", ""))
    cls = _exception_type(name)
    error: BaseException | None = None
    args = described.get("args")
    for attempt in ([*args] if isinstance(args, list) else None, [message]):
        if cls is None or attempt is None:
            continue
        try:
            error = cls(*attempt)
        except Exception:
            error = None
        if type(error) is cls and str(error) == message:
            break
        error = None
    if error is None:
        error = HostTaskError(name, message, host_traceback)
    if host_traceback:
        error.add_note(f"In the task's warm state host ({where}):\n{host_traceback.rstrip()}")
    return error


def _exception_type(name: str) -> type[BaseException] | None:
    """The exception class called ``name`` (``module.qualname``), when it is a builtin one or
    one of a module already imported here: the reply imports nothing."""
    module_name, _, qualname = name.rpartition(".")
    module = builtins if module_name == "builtins" else sys.modules.get(module_name)
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None) if part and not part.startswith("<") else None
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return None


def check_report(
    report: str,
    *,
    job: str,
    operator: str,
    subtask: int,
    checkpoint_id: int,
    key_groups: Container[int],
) -> None:
    """Refuse (:class:`HostReplyError`) a snapshot report that is not the task's own: another
    job, operator, subtask or checkpoint, or a file outside the task's key-group partitions
    of its own tables (a relative path ``<column>=<key group>/<name>.parquet``; operator state:
    the subtask's partition) or output files of another checkpoint or subtask."""
    who = f"job {job}, operator {operator}, subtask {subtask}, checkpoint {checkpoint_id}"
    try:
        meta = json.loads(report)
        own = (meta["job"], meta["operator"], meta["subtask"], meta["checkpoint_id"])
        if own != (job, operator, subtask, checkpoint_id):
            raise HostReplyError(f"{who}: its host reported for {own}")
        for state in meta["states"]:
            kind = state.get("table_kind", "keyed")
            allowed: Container[int] = (
                range(subtask, subtask + 1) if kind == "operator" else key_groups
            )
            for part in state["changed_key_groups"]:
                if part not in allowed:
                    raise HostReplyError(f"{who}: its host reported key group {part}")
            for f in state["files"]:
                _check_file(who, f["path"], f["key_group"], allowed)
        prefix = f"part-cp{checkpoint_id:012d}-{subtask:05d}-"
        outputs = ("output", "late_output", *(k for k in meta if k.startswith("side_output:")))
        for output in outputs:
            written = meta.get(output)
            path = None if written is None else str(written["path"])
            if path is not None and not (_OUTPUT_FILE.match(path) and path.startswith(prefix)):
                raise HostReplyError(f"{who}: its host reported the output file {path!r}")
    except HostReplyError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HostReplyError(f"{who}: its host's report is malformed ({exc!r})") from None


def _check_file(who: str, path: Any, key_group: Any, allowed: Container[int]) -> None:
    parts = str(path).split("/")
    found = _PARTITION.match(parts[0]) if len(parts) == 2 else None
    if (
        found is None
        or not isinstance(key_group, int)
        or int(found.group(1)) != key_group
        or key_group not in allowed
        or parts[1] in ("", ".", "..")
        or not parts[1].endswith(".parquet")
        or posixpath.normpath(str(path)) != path
        or "\\" in str(path)
        or ":" in str(path)
    ):
        raise HostReplyError(f"{who}: its host reported the file {path!r}, not one of the task's")
