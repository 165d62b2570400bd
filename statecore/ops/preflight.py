"""Pre-flight compatibility: would a job's states restore from a savepoint? For CI before a deploy.

The job's current states come from its function (probed against empty state, exactly as the
runtime does before a run) or, without one, from the catalog's last registration. Each is
compared with the savepoint's by the rules a restore applies (:mod:`statecore.compatibility`):
the same kind, and a stored schema that is compatible as is or after migration. A state the
savepoint does not have starts empty (fine); a state of the savepoint the job no longer has would
not be restored (refused unless allowed, as Flink's ``--allowNonRestoredState``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from statecore.catalog import StateRecord
from statecore.checkpoint.points import RestorePoint
from statecore.compatibility import check_schema
from statecore.errors import ConfigError, StateMigrationError
from statecore.runtime.functions import KeyedProcessFunction
from statecore.runtime.task import probe_states
from statecore.types import TypeInfo, schema_from_text

__all__ = [
    "StateCheck",
    "check_compatibility",
    "function_states",
    "load_function",
    "raise_if_incompatible",
]

COMPATIBLE = "compatible"
MIGRATES = "compatible after migration"
NEW = "new"
NOT_RESTORED = "not restored"
INCOMPATIBLE = "incompatible"


@dataclass(frozen=True, kw_only=True)
class StateCheck:
    """The verdict for one state."""

    operator: str
    state: str
    verdict: str  # compatible (after migration), new, not restored or incompatible
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_function(spec: str) -> KeyedProcessFunction:
    """``module:Class`` (or ``module:factory``) → a new instance of the job's function."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            f"function {spec!r}: write it as module:Class, e.g. jobs.clickstream:UserActivity"
        )
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"function {spec!r} cannot be loaded: {exc}") from exc
    function = factory()
    if not isinstance(function, KeyedProcessFunction):
        raise ConfigError(f"{spec} is a {type(function).__name__}, not a KeyedProcessFunction")
    return function


def _key_info(point: RestorePoint) -> TypeInfo:
    for state in point.states:
        schema = schema_from_text(state.schema)
        if "key" in schema.names:
            key_type = schema.field("key").type
            if pa.types.is_integer(key_type):
                return TypeInfo.of(int)
            if pa.types.is_binary(key_type):
                return TypeInfo.of(bytes)
            return TypeInfo.of(str)
    return TypeInfo.of(str)


def function_states(
    function: KeyedProcessFunction, point: RestorePoint, *, job: str, operator: str = "main"
) -> list[StateRecord]:
    """The states ``function`` registers (keyed, operator state and timers), keyed like the
    savepoint's job, as the runtime probes them before a run."""
    registered = probe_states(
        function,
        _key_info(point),
        job=job,
        operator=operator,
        parallelism=point.parallelism,
        max_parallelism=point.max_parallelism,
    )
    return [
        StateRecord(
            job=job, operator=operator, name=s.name, kind=s.kind, descriptor={}, schema=s.schema
        )
        for s in registered
    ]


def _schema_verdict(stored: pa.Schema, new: pa.Schema) -> tuple[str, str]:
    check = check_schema(stored, new)
    if check.is_incompatible:
        return INCOMPATIBLE, check.reason
    if check.needs_migration:
        return MIGRATES, check.reason
    return COMPATIBLE, ""


def check_compatibility(current: Sequence[StateRecord], against: RestorePoint) -> list[StateCheck]:
    """The verdict for every state of ``current`` and of ``against``."""
    stored = {(s.operator, s.name): s for s in against.states}
    checks = []
    for state in current:
        old = stored.pop((state.operator, state.name), None)
        if old is None:
            checks.append(
                StateCheck(
                    operator=state.operator,
                    state=state.name,
                    verdict=NEW,
                    reason="not in the savepoint: starts empty",
                )
            )
        elif old.kind != state.kind:
            checks.append(
                StateCheck(
                    operator=state.operator,
                    state=state.name,
                    verdict=INCOMPATIBLE,
                    reason=f"the kind changed from {old.kind} to {state.kind}",
                )
            )
        else:
            verdict, reason = _schema_verdict(
                schema_from_text(old.schema), schema_from_text(state.schema)
            )
            checks.append(
                StateCheck(
                    operator=state.operator, state=state.name, verdict=verdict, reason=reason
                )
            )
    checks += [
        StateCheck(
            operator=s.operator,
            state=s.name,
            verdict=NOT_RESTORED,
            reason="in the savepoint but no longer registered by the job",
        )
        for s in stored.values()
    ]
    return sorted(checks, key=lambda c: (c.operator, c.state))


def raise_if_incompatible(
    checks: Sequence[StateCheck], against: RestorePoint, *, allow_not_restored: bool = False
) -> None:
    """:class:`StateMigrationError` naming every state that would fail the restore."""
    bad = [
        c
        for c in checks
        if c.verdict == INCOMPATIBLE or (c.verdict == NOT_RESTORED and not allow_not_restored)
    ]
    if bad:
        details = "; ".join(f"{c.operator}/{c.state}: {c.verdict} ({c.reason})" for c in bad)
        raise StateMigrationError(f"job {against.job!r} cannot restore {against.label}: {details}")
