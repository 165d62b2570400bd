"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing page or
an unresolved mkdocstrings reference fails), and the README's own links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(300)


def test_readme_docs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-5000:]
    assert (site / "index.html").is_file()
    reference = (site / "api" / "statecore" / "index.html").read_text()
    assert "KeyedProcessFunction" in reference  # mkdocstrings rendered the docstrings


def test_readme_links_resolve() -> None:
    """The README is not part of the site: its relative links are checked here."""
    text = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert targets and not missing, missing
