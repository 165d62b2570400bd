"""The PyFlink-layer example of docs/pyflink.md (moved from the README) runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyflink.md"


def test_pyflink_readme_example_runs() -> None:
    text = PAGE.read_text()
    start = text.index("## The PyFlink layer")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    code = match.group(1)
    assert "from statecore.pyflink" in code and "def on_timer" in code
    namespace: dict[str, Any] = {"__name__": "readme_pyflink"}
    exec(compile(code, str(PAGE), "exec"), namespace)  # the page's own code
    assert namespace["harness"].output == [("ann", 2)]
