"""Windows in statecore's own API: ``from statecore.windows import window, TumblingWindows``.

The names of :mod:`statecore.runtime.windows`, where windows are built; see ``docs/windows.md``.
"""

from statecore.runtime.windows import *  # noqa: F403
from statecore.runtime.windows import __all__ as __all__
