"""``statecore demo`` ends with what to try next, and each step it names runs as printed: its
``statecore`` commands on the demo's job (a home as ``make demo`` leaves it, made in process as
tests/test_readme_examples.py makes it) and ``make up``, a target of the Makefile."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from statecore.cli.commands import demo_report
from statecore.config import StatecoreConfig
from tests.test_readme_examples import REPO, build_demo_home, cli


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_home(tmp_path_factory.mktemp("demo"))


def test_documented_path_demo_ends_with_the_next_steps_and_they_run(demo_home: Path) -> None:
    report = demo_report(StatecoreConfig.resolve(home=str(demo_home), env={}))
    assert "$ statecore checkpoints list" in report and "20260103" in report
    steps = report[report.index("\nNext") :].strip().splitlines()
    assert steps[0].startswith("Next") and "A ten-minute tour" in steps[0]
    assert report.rstrip().endswith(steps[-1])  # the last thing the demo prints
    commands = [shlex.split(s, comments=True) for s in steps[1:]]
    statecore = [c for c in commands if c[0] == ".venv/bin/statecore"]
    assert len(statecore) == 3
    readme = (REPO / "README.md").read_text()
    for command in statecore:
        # the tour's own commands, on the demo's latest checkpoint ...
        assert shlex.join(command) in readme.replace('"', "'"), command
        # ... and each runs on the demo's job
        code, out = cli(demo_home, *command[1:])
        assert code == 0 and out.strip(), (command, out)
    assert ["make", "up"] in commands
    assert re.search(r"^up:", (REPO / "Makefile").read_text(), re.M)
