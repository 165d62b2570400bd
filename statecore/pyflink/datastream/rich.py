"""Rich functions: ``open(runtime_context)`` and ``close()`` of every user function a ported job
runs (``map``, ``flat_map``, ``filter``, ``reduce``, key selectors, process functions), called
from one place, as Flink's ``AbstractUdfStreamOperator`` opens the function it wraps.

A keyed function (the function of a ``KeyedStream``: ``key_by(...).flat_map(f)``,
``reduce``, ``process``) gets PyFlink's
:class:`~statecore.pyflink.datastream.functions.RuntimeContext` with the key's state; every other
function gets a :class:`NonKeyedRuntimeContext`: the subtask's getters, and a clear error for
keyed state, as in Flink.

>>> from statecore.pyflink.datastream.functions import MapFunction
>>> class Tag(MapFunction):
...     def open(self, runtime_context):
...         self.tag = runtime_context.get_index_of_this_subtask()
...     def map(self, value):
...         return value, self.tag
>>> tag = Tag()
>>> context = NonKeyedRuntimeContext(TaskInfo(operator="map", subtask_index=2, parallelism=4))
>>> open_functions([tag, len], context)
>>> tag.map("a"), context.get_task_name_with_subtasks()
(('a', 2), 'map (3/4)')
>>> context.get_state(None)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
statecore.errors.StateAccessError: map: keyed state is only available on a keyed stream ...
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError, StateAccessError
from statecore.pyflink.datastream.functions import Function, RuntimeContext

__all__ = [
    "NonKeyedRuntimeContext",
    "TaskInfo",
    "close_functions",
    "function_object",
    "open_functions",
]

DEFAULT_MAX_PARALLELISM = 128
"""Flink's default max parallelism (a non-keyed function's ``get_max_number_of_parallel_subtasks``
when the job set none)."""


@dataclass(frozen=True, kw_only=True)
class TaskInfo:
    """Which parallel instance a non-keyed function runs in. ``parallelism`` is ``None`` where
    Spark decides it per micro-batch (the stage that reads a streaming source)."""

    operator: str
    subtask_index: int
    parallelism: int | None
    max_parallelism: int = DEFAULT_MAX_PARALLELISM


def function_object(function: Any) -> Any:
    """The object whose ``open``/``close`` run: the function itself, or the instance a bound
    method (``selector.get_key``) belongs to."""
    return getattr(function, "__self__", function)


def _rich(functions: Iterable[Any]) -> list[Function]:
    seen: list[Function] = []
    for function in functions:
        target = function_object(function)
        if isinstance(target, Function) and all(target is not s for s in seen):
            seen.append(target)
    return seen


def open_functions(functions: Iterable[Any], runtime_context: Any) -> None:
    """``open(runtime_context)`` on each PyFlink function of ``functions`` (plain callables have
    none), each once."""
    for function in _rich(functions):
        function.open(runtime_context)


def close_functions(functions: Iterable[Any]) -> None:
    """``close()`` on each PyFlink function of ``functions``, every one even if one raises (the
    first error is raised after)."""
    error: BaseException | None = None
    for function in _rich(functions):
        try:
            function.close()
        except BaseException as exc:  # closed the others first, raised below
            error = error or exc
    if error is not None:
        raise error


class NonKeyedRuntimeContext(RuntimeContext):
    """The runtime context of a function of a stream without a key: the subtask's getters
    (from statecore's runtime context, or a :class:`TaskInfo`); keyed state raises
    :class:`~statecore.errors.StateAccessError`, as Flink's ``getState`` does outside a keyed
    stream."""

    __slots__ = ()

    def __init__(self, context: Any) -> None:
        self._context = context

    def _keyed_only(self, method: str) -> NoReturn:
        raise StateAccessError(
            f"{self._context.operator}: keyed state is only available on a keyed stream "
            f"(key_by(...) before the function); {method} is called from a function of a "
            "stream without a key"
        )

    def get_state(self, state_descriptor: Any) -> Any:
        self._keyed_only("get_state")

    def get_list_state(self, state_descriptor: Any) -> Any:
        self._keyed_only("get_list_state")

    def get_map_state(self, state_descriptor: Any) -> Any:
        self._keyed_only("get_map_state")

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        self._keyed_only("get_reducing_state")

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        self._keyed_only("get_aggregating_state")

    def get_number_of_parallel_subtasks(self) -> int:
        parallelism: int | None = self._context.parallelism
        if parallelism is None:
            raise PyFlinkUnsupportedError(
                f"{self._context.operator}: the functions before key_by of a streaming job run "
                "in the tasks that read the source, as many as Spark makes per micro-batch; the "
                "number is known after key_by (a keyed function's runtime context) "
                f"({COMING_FROM_PYFLINK})"
            )
        return parallelism

    def get_task_name_with_subtasks(self) -> str:
        context = self._context
        total = "?" if context.parallelism is None else context.parallelism
        return f"{context.operator} ({context.subtask_index + 1}/{total})"
