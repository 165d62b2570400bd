"""The README's PyFlink-layer example runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def test_pyflink_readme_example_runs() -> None:
    text = README.read_text()
    start = text.index("#### The PyFlink layer")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    code = match.group(1)
    assert "from statecore.pyflink" in code and "def on_timer" in code
    namespace: dict[str, Any] = {"__name__": "readme_pyflink"}
    exec(compile(code, str(README), "exec"), namespace)  # the README's own code
    assert namespace["harness"].output == [("ann", 2)]
