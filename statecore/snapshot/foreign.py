"""Commits of other writers on a state table: found, named, and never undone.

A state table is open: any Delta writer can commit to it (a user's ``UPDATE`` in Spark SQL, a
``write_deltalake`` append, a platform's OPTIMIZE). When such a commit lands after the version a
checkpoint builds on, statecore used to RESTORE the table to that version before committing,
which silently undid the other writer's change. Now a checkpoint finds the table past its base
version and reads the commits in between (:func:`commits_after`): those statecore made itself
(an attempt of a checkpoint that never completed, a rollback) are still restored away, but a
commit of another writer fails the checkpoint with
:class:`~statecore.errors.ForeignCommitError` naming it (version, operation, time, engine), and
nothing is restored over it (:func:`check_no_foreign`). The one exception: when the other
writers' commits leave the table exactly as the base version had it (the user RESTOREd it, as
the error tells), there is nothing of theirs to undo.

A statecore commit is known by its ``commitInfo``: a ``statecore.*`` key (every checkpoint
commit names its checkpoint, every restore statecore makes names itself :data:`RESTORE_METADATA`,
a maintenance rewrite :data:`MAINTENANCE_METADATA`),
or the writer's fencing epoch among its application transactions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from deltalake.exceptions import DeltaError, TableNotFoundError

from statecore.errors import CheckpointCommitError, ForeignCommitError
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.storage import open_table

__all__ = [
    "MAINTENANCE_METADATA",
    "RESTORE_METADATA",
    "LoggedCommit",
    "check_no_foreign",
    "commits_after",
]

RESTORE_METADATA = "statecore.restore"
"""The key statecore's own RESTOREs carry in their ``commitInfo`` (the version restored to)."""

MAINTENANCE_METADATA = "statecore.maintenance"
"""The key a maintenance operation's rewrite commit carries (its checkpoint id), so one that
names no state metadata is still known as statecore's."""

_EPOCH_APP = "statecore-epoch:"


@dataclass(frozen=True, kw_only=True)
class LoggedCommit:
    """One commit of a table's log, as a message names it."""

    version: int
    operation: str
    timestamp: datetime | None
    engine: str
    statecore: bool

    def __str__(self) -> str:
        when = (
            "at an unknown time"
            if self.timestamp is None
            else f"at {self.timestamp:%Y-%m-%d %H:%M:%S} UTC"
        )
        return f"version {self.version} ({self.operation} {when}, by {self.engine})"


def _read(path: str, uri: str, version: int) -> LoggedCommit:
    fs, _ = table_filesystem(uri)
    with fs.open_input_stream(path) as f:
        lines = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    info: dict[str, object] = {}
    epoch = False
    for action in lines:
        if isinstance(action.get("commitInfo"), dict):
            info = action["commitInfo"]
        txn = action.get("txn")
        if isinstance(txn, dict) and str(txn.get("appId", "")).startswith(_EPOCH_APP):
            epoch = True
    stamp = info.get("timestamp")
    return LoggedCommit(
        version=version,
        operation=str(info.get("operation", "unknown operation")),
        timestamp=None if not isinstance(stamp, int) else datetime.fromtimestamp(stamp / 1000, UTC),
        engine=str(info.get("engineInfo") or info.get("clientVersion") or "an unknown engine"),
        statecore=epoch or any(str(k).startswith("statecore.") for k in info),
    )


def commits_after(uri: str, version: int, head: int) -> list[LoggedCommit]:
    """The commits of the table at ``uri`` after ``version`` up to ``head``, oldest first."""
    _, root = table_filesystem(uri)
    out = []
    for v in range(version + 1, head + 1):
        try:
            out.append(_read(f"{root}/_delta_log/{v:020d}.json", uri, v))
        except (OSError, ValueError) as exc:
            raise CheckpointCommitError(
                f"state table {uri}: commit {v} of its log cannot be read: {exc}"
            ) from exc
    return out


def _files(uri: str, version: int) -> set[str]:
    try:
        return set(open_table(uri, version=version).file_uris())
    except (TableNotFoundError, DeltaError, OSError) as exc:
        raise CheckpointCommitError(
            f"state table {uri}: version {version} cannot be read: {exc}"
        ) from exc


def check_no_foreign(uri: str, base: int, head: int, *, label: str, checkpoint: str) -> bool:
    """Raise :class:`ForeignCommitError` when a writer other than statecore committed to the
    table at ``uri`` after ``base`` (up to ``head``) and its change is still there; whether
    statecore's own commits after ``base`` are left to restore away (``False``: the table
    holds exactly the base version's files already)."""
    commits = commits_after(uri, base, head)
    foreign = [c for c in commits if not c.statecore]
    if not foreign:
        return True
    base_files = _files(uri, base)
    if _files(uri, foreign[-1].version) == base_files:  # their change was undone by them
        return head != foreign[-1].version and _files(uri, head) != base_files
    named = "; ".join(str(c) for c in foreign)
    raise ForeignCommitError(
        f"{checkpoint}: the state table of {label} at {uri} was changed by another writer "
        f"after version {base}, which this checkpoint builds on: {named}. statecore does not "
        "undo another writer's commit: nothing was restored over it, and the checkpoint "
        "fails (it is not completed; the job's last completed checkpoint stays its state). "
        f"To go on, undo that change yourself and run again: RESTORE TABLE delta.`{uri}` TO "
        f"VERSION AS OF {base} in Spark SQL, or DeltaTable('{uri}').restore({base}) with "
        "deltalake. To keep such an edit as state, make it on a savepoint's tables instead "
        "and restore the job from that savepoint (docs/operations.md, 'State tables written "
        "by other tools')"
    )
