"""The statecore page in Airflow's UI: a FastAPI app the API server mounts under ``/statecore``.

:data:`app` is an ASGI app that builds the real one (:func:`statecore_airflow.ui.app.create_app`)
on its first request: every Airflow process loads plugins, and only the API server serves
them, so the others never import FastAPI's routes, the page or statecore for it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["LazyApp", "app"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app that builds ``factory()`` on its first call and hands every call to it."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._app: Any = None
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._factory()
        await self._app(scope, receive, send)


def _create() -> Any:
    from statecore_airflow.ui.app import create_app

    return create_app()


app = LazyApp(_create)
