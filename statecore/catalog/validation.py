"""Checks of the arguments the catalog is given, before anything is written."""

from __future__ import annotations

from collections.abc import Sequence

from statecore import config
from statecore.catalog.records import StateRecord, TableVersion
from statecore.errors import CheckpointCommitError, ConfigError

__all__ = [
    "check_checkpoint_id",
    "check_name",
    "check_parallelism",
    "check_states",
    "check_tables",
]

_MAX_NAME = 200  # the width of the name columns
_UPPER_MAX_PARALLELISM = 1 << 15  # as Flink: key groups are numbered in 15 bits


def check_name(what: str, name: str) -> None:
    """A name that fits its column; job, operator and savepoint names also name folders (see
    :mod:`statecore.config`)."""
    if what in ("job", "operator", "savepoint"):
        config.check_name(what, name)
    if not name or len(name) > _MAX_NAME:
        raise ConfigError(f"{what} name {name!r} must have 1 to {_MAX_NAME} characters")


def check_checkpoint_id(job: str, checkpoint_id: int) -> None:
    """Checkpoint ids count from 0, as Spark micro-batch ids."""
    if checkpoint_id < 0:
        raise ConfigError(f"checkpoint id {checkpoint_id} of job {job!r} must be >= 0")


def check_parallelism(job: str, parallelism: int, max_parallelism: int) -> None:
    """1 <= parallelism <= max parallelism <= 32768."""
    if not 1 <= max_parallelism <= _UPPER_MAX_PARALLELISM:
        raise ConfigError(
            f"job {job!r}: max parallelism {max_parallelism} must be in "
            f"[1, {_UPPER_MAX_PARALLELISM}]"
        )
    if not 1 <= parallelism <= max_parallelism:
        raise ConfigError(
            f"job {job!r}: parallelism {parallelism} must be in [1, max parallelism "
            f"{max_parallelism}]"
        )


def check_states(job: str, operator: str, states: Sequence[StateRecord]) -> None:
    """States registered together: all of ``operator`` in ``job``, each name once."""
    check_name("operator", operator)
    seen: set[str] = set()
    for state in states:
        if (state.job, state.operator) != (job, operator):
            raise ConfigError(
                f"state {state.name!r} of operator {state.operator!r} in job {state.job!r} "
                f"cannot be registered for operator {operator!r} in job {job!r}"
            )
        check_name("state", state.name)
        if state.name in seen:
            raise ConfigError(
                f"state {state.name!r} is given twice for operator {operator!r} in job {job!r}"
            )
        seen.add(state.name)


def check_tables(where: str, tables: Sequence[TableVersion]) -> None:
    """The tables of one checkpoint: each (operator, state, table kind) once."""
    seen: set[tuple[str, str, str]] = set()
    for table in tables:
        check_name("operator", table.operator)
        check_name("state", table.state)
        name = (table.operator, table.state, table.table_kind)
        if name in seen:
            raise CheckpointCommitError(
                f"{where}: the {table.table_kind} table of state {table.state!r} of operator "
                f"{table.operator!r} is given twice"
            )
        seen.add(name)
