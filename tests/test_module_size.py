"""No module of ``statecore`` is longer than 600 lines: one that grows past it is usually two
concepts, split by concept (STYLE.md, "Shape")."""

from __future__ import annotations

from pathlib import Path

import statecore

LIMIT = 600


def test_no_statecore_module_is_longer_than_600_lines() -> None:
    root = Path(statecore.__file__).parent
    long = {
        str(path.relative_to(root.parent)): n
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert not long, f"modules longer than {LIMIT} lines: {long}"
