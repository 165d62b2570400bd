"""``make test``'s groups (``tests/groups.py``) of the real test files as pytest collects them:
the month and the fortnight, each 20 to 35 minutes mostly waiting on ``make up``'s Airflow, land
in two groups (two processes side by side), not one after the other in one."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.airflow.dagrun import REPO
from tests.groups import GROUPS

MONTH = "tests/airflow/test_month.py"
FORTNIGHT = "tests/airflow/test_own_airflow_fortnight.py"
# one collection of both files in a pytest of its own, printing each test's group
COLLECT = f"""
import json, pytest
from tests.groups import group_of
class Groups:
    def pytest_collection_finish(self, session):
        self.found = sorted({{(i.nodeid.split("::")[0], group_of(i)) for i in session.items}})
plugin = Groups()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", {MONTH!r}, {FORTNIGHT!r}],
                   plugins=[plugin])
print("GROUPS=" + json.dumps(plugin.found if code == 0 else None))
"""


def test_the_month_and_the_fortnight_run_in_groups_of_their_own() -> None:
    done = subprocess.run(
        [sys.executable, "-c", COLLECT], cwd=REPO, capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("GROUPS=")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(lines[-1].removeprefix("GROUPS="))
    assert found == [[MONTH, "weeks"], [FORTNIGHT, "fortnight"]], done.stdout[-3000:]
    assert {"weeks", "fortnight"} <= set(GROUPS)
