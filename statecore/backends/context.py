"""``KeyContext``: the current key of a keyed state backend, as its states and timers read it.

A backend owns one :class:`KeyContext`; the runtime makes a key current only through the
backend (``set_current_key``, which checks the key group and, for RocksDB, encodes the key's
prefix; or, per record of a batch whose key groups the backend checked once,
its batch key-setter), and the backend's states and its timer service read the context on every
access instead of the backend's private fields.

>>> context = KeyContext()
>>> context.key_group is None  # no current key yet
True
>>> context.key, context.key_group = "user-1", 86
>>> saved = context.save()
>>> context.key, context.key_group = "user-2", 3
>>> context.restore(saved)
>>> context.key, context.key_group
('user-1', 86)
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["KeyContext", "KeyContextOwner", "SavedKey"]

SavedKey = tuple[Any, "int | None", bytes]
"""What :meth:`KeyContext.save` returns: key, key group and prefix."""


class KeyContext:
    """The current key, its key group and (for RocksDB) its encoded key prefix.

    ``key_group is None`` means no key is current: keyed state is only available per record.
    """

    __slots__ = ("key", "key_group", "prefix")

    def __init__(self) -> None:
        self.key: Any = None
        self.key_group: int | None = None
        self.prefix: bytes = b""
        """``[key group][key]`` as RocksDB keys start (empty when no key is current, and on
        backends that do not encode keys)."""

    def save(self) -> SavedKey:
        """The current key, to :meth:`restore` after making other keys current."""
        return self.key, self.key_group, self.prefix

    def restore(self, saved: SavedKey) -> None:
        self.key, self.key_group, self.prefix = saved

    def clear(self) -> None:
        """No key is current any more."""
        self.key, self.key_group, self.prefix = None, None, b""

    def __repr__(self) -> str:
        return f"KeyContext(key={self.key!r}, key_group={self.key_group!r})"


class KeyContextOwner(Protocol):
    """What a backend's states need of it: the :class:`KeyContext` they read the current key
    from (the states of a backend depend on this, not on the backend's class)."""

    key_context: KeyContext
