"""An error raised in a Spark task, brought back to the driver as the error it was.

Spark reports a Python worker's exception as text (``PythonException``): the worker's last
traceback, ending with ``module.Type: message`` (a message may span lines). A
:mod:`statecore.errors` error becomes itself again on the driver; any other error a
:class:`~statecore.errors.CheckpointCommitError` that names its type and message. Either way the
Spark error is the ``__cause__`` (the caller raises ``from`` it).
"""

from __future__ import annotations

import re

from statecore import errors

__all__ = ["raised_in_task", "task_error"]

_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"(?P<name>[A-Za-z_][\w.]*)(?::[ ]?(?P<message>.*))?\Z", re.DOTALL)
_JVM_FRAMES = re.compile(r"\n\s*at [\w$.]+\(", re.MULTILINE)


def raised_in_task(text: str) -> tuple[str, str] | None:
    """The qualified type name and the whole message of the exception that ends the last
    Python traceback in ``text``; ``None`` without one.

    >>> raised_in_task('Traceback (most recent call last):\\n  File "f.py", line 1\\n'
    ...                '    boom()\\nValueError: bad\\nsecond line')
    ('ValueError', 'bad\\nsecond line')
    """
    _, found, tail = text.rpartition(_TRACEBACK)
    if not found:
        return None
    lines = tail.split("\n")[1:]
    while lines and (not lines[0].strip() or lines[0][:1].isspace()):  # the frames
        lines = lines[1:]
    rest = "\n".join(lines)
    jvm = _JVM_FRAMES.search(rest)  # a Py4J error goes on with the JVM's stack
    if jvm is not None:
        rest = rest[: jvm.start()]
    match = _EXCEPTION.match(rest.strip())
    if match is None:
        return None
    return match["name"], (match["message"] or "").strip()


def task_error(exc: Exception, job: str, checkpoint_id: int) -> Exception:
    """The error to raise on the driver (``from exc``) for ``exc``, a Spark task's failure."""
    where = f"job {job!r}, checkpoint {checkpoint_id}"
    raised = raised_in_task(str(exc))
    if raised is None:
        return errors.CheckpointCommitError(f"{where} failed in a Spark task: {exc}")
    name, message = raised
    module, _, type_name = name.rpartition(".")
    if module == errors.__name__:
        cls = getattr(errors, type_name, None)
        if isinstance(cls, type) and issubclass(cls, errors.StateError):
            return cls(f"{where}: {message}")
    return errors.CheckpointCommitError(
        f"{where} failed in a Spark task: {name}: {message}"
        if message
        else f"{where} failed in a Spark task: {name}"
    )
