"""docs/helm.md's offline checks ("Checking the chart offline") run as written: ``make helm``
(the ``helm`` tests of this folder, in a pytest of their own) and the page's lint and
render-and-validate lines, from the repository's root. Not marked ``helm`` (``make helm`` would
run itself); ``slow``: it runs every chart check once more."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "helm.md"


def offline_checks() -> str:
    """The bash block of the section "Checking the chart offline" of docs/helm.md."""
    section = PAGE.read_text().split("\n## Checking the chart offline\n", 1)[1].split("\n## ")[0]
    [block] = re.findall(r"```bash\n(.*?)```", section, re.S)
    return block


def test_documented_path_helm_checks_run_offline_as_written() -> None:
    block = offline_checks()
    assert block.startswith("make helm") and "kubernetes-validate" in block
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    [passed] = re.findall(r"^(\d+) passed", out, re.M)  # make helm's pytest
    assert int(passed) >= 100 and " failed" not in out.replace("0 chart(s) failed", ""), out
    assert "1 chart(s) linted, 0 chart(s) failed" in out
