"""PyFlink's call spellings of statecore attributes, taught where user code fails.

PyFlink's contexts have methods where statecore's have attributes: ``ctx.timestamp()``,
``ctx.get_current_key()``, ``runtime_context.get_index_of_this_subtask()``. A missing name
raises :class:`~statecore.errors.PyFlinkSpellingError` by itself
(:class:`~statecore.errors.PyFlinkSpelling`), and so does calling the timer service or a
``TimeDomain``. Calling an attribute that holds a plain value (``ctx.timestamp()``, an ``int``
or ``None``; ``ctx.current_key()``, the key) fails in Python itself with ``'int' object is not
callable``: making those values callable would cost every record. So the task runs user code
inside :data:`PYFLINK_HINTS`, which looks at such a ``TypeError`` only once it is raised: when
the call that failed is ``<name>.<attribute>()`` on one of statecore's contexts, it raises a
``PyFlinkSpellingError`` naming the attribute instead (the original chained as its cause).
Nothing runs per record.

>>> from statecore.backends import HeapKeyedStateBackend
>>> from statecore.keygroups import KeyGroupRange
>>> from statecore.runtime.functions import Context
>>> from statecore.types import TypeInfo
>>> ctx = Context(HeapKeyedStateBackend(key_type=TypeInfo.of(str),
...               key_group_range=KeyGroupRange(0, 127), max_parallelism=128))
>>> ctx.timestamp = 1000
>>> with PYFLINK_HINTS:
...     ctx.timestamp()
Traceback (most recent call last):
...
statecore.errors.PyFlinkSpellingError: ctx.timestamp() is PyFlink's spelling; statecore \
spells it ctx.timestamp (an attribute, here 1000) (see docs/pyflink.md, 'Coming from PyFlink')
"""

from __future__ import annotations

import linecache
import re
import traceback
from types import TracebackType

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkSpellingError
from statecore.runtime.functions import (
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    RuntimeContext,
)

__all__ = ["PYFLINK_HINTS", "PyFlinkHints", "call_hint"]

_CONTEXTS = (Context, RuntimeContext, FunctionInitializationContext, FunctionSnapshotContext)
_NOT_CALLABLE = re.compile(r"'[\w.]+' object is not callable")
_ATTRIBUTE_CALL = re.compile(r"(?P<owner>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.(?P<name>\w+)\s*\(.*\)")


def call_hint(exc: BaseException) -> str | None:
    """What to say about ``exc``: a hint when it is ``'...' object is not callable`` raised by
    calling an attribute of a statecore context, else ``None``."""
    if type(exc) is not TypeError or not _NOT_CALLABLE.fullmatch(str(exc)):
        return None
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = traceback.extract_tb(tb, limit=1)[-1]
    start, end = where.colno, where.end_colno
    if where.lineno is None or start is None or end is None or where.end_lineno != where.lineno:
        return None
    line = linecache.getline(where.filename, where.lineno).encode()  # columns count bytes
    called = _ATTRIBUTE_CALL.fullmatch(line[start:end].decode(errors="replace"))
    if called is None:
        return None
    owner_path = called["owner"].split(".")
    frame = tb.tb_frame
    if owner_path[0] not in frame.f_locals:
        return None
    owner = frame.f_locals[owner_path[0]]
    try:
        for part in owner_path[1:]:
            owner = getattr(owner, part)
        value = getattr(owner, called["name"])
    except Exception:  # a hint is best effort: the original error stands
        return None
    if not isinstance(owner, _CONTEXTS):
        return None
    expression = f"{called['owner']}.{called['name']}"
    is_property = isinstance(getattr(type(owner), called["name"], None), property)
    kind = "a property" if is_property else "an attribute"
    return (
        f"{expression}() is PyFlink's spelling; statecore spells it {expression} "
        f"({kind}, here {value!r}) ({COMING_FROM_PYFLINK})"
    )


class PyFlinkHints:
    """A context manager: a ``TypeError`` that :func:`call_hint` explains leaves it as a
    :class:`~statecore.errors.PyFlinkSpellingError`; anything else passes unchanged."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        hint = call_hint(exc)
        if hint is not None:
            raise PyFlinkSpellingError(hint) from exc


PYFLINK_HINTS = PyFlinkHints()
"""The one instance the task enters around user code (it holds no state)."""
