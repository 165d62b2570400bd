"""Every fenced example of README.md and docs/ runs as its page is read, or says beside it why it
does not.

Each page's runnable blocks run in the page's order in a home of the page's own: a fresh copy of
a home as ``make demo`` leaves it (the demo's job ``clickstream``, checkpoints 20260101 to
20260103 at parallelism 2, made in process without Spark as tests/cli/test_cli.py makes them;
no savepoint) holding, as a user's home does once a second DAG ran, another job with
checkpoints (``clickstream_stream``, checkpoints 0 and 1, as ``streaming_pipeline`` leaves it).
A block may use what an earlier block of its page made (a savepoint, a file in the working
folder), as the page's reader has it; never what another page made: a page that queries a
savepoint makes it first, in a block its reader sees. An example that only works while the
demo's job is the only one (``statecore sql --checkpoint 20260101`` without ``--job`` once
did) fails here too. A block is one of:

- run here: a ``python`` block in a subprocess with ``STATECORE_HOME`` the page's home; a
  ``bash`` block whose every line is a ``statecore`` command (``export NAME=value`` lines set
  the environment, for the page's later blocks too), each command run in this process against
  the page's home and required to exit with status 0;
- ``<!-- tested-by: tests/path.py::test_name -->`` on the line before the fence: that test exists
  and holds the block's text, or reads the block from its page by name;
- ``<!-- illustrative: reason -->`` on the line before the fence: not run, for the reason given.

``<!-- run-with: code -->`` before a Python block runs ``code`` first (an import the page's prose
gives). A mark may also end the line before the fence (inside a list item, where a line of its
own would end the list). A block with none of these that cannot run here fails the test.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import clickstream
from statecore.cli import main
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from tests.inprocess import run_checkpoint

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)[ ]*$")
MARK = re.compile(r"<!--\s*(?P<kind>illustrative|tested-by|run-with):\s*(?P<text>.*?)\s*-->\s*$")
Event = namedtuple("Event", ["user_id", "event_type", "amount", "ts"])

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    mark: str | None  # illustrative | tested-by | run-with
    mark_text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent = fence["indent"]
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
        mark = MARK.search(lines[i - 1]) if i > 0 else None
        found.append(
            Block(
                page,
                i + 1,
                fence["lang"],
                code,
                mark["kind"] if mark else None,
                mark["text"] if mark else "",
            )
        )
        assert lines[end].startswith(indent), f"{page}:{end + 1}: closing fence indented less"
        i = end + 1
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def statecore_commands(block: Block) -> list[list[str]] | None:
    """The block's commands as argument lists (``export`` lines as ``["export", ...]``), or None
    when a line is anything but a ``statecore`` command or an export."""
    commands = []
    for line in block.code.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            return None
        if not words:
            continue
        if words[0] == "export" and all("=" in w for w in words[1:]):
            commands.append(words)
            continue
        if words[0] not in ("statecore", ".venv/bin/statecore"):
            return None
        if any(w.startswith("[") or w == "|" for w in words):
            return None  # a synopsis, not a command
        commands.append(words[1:])
    return commands or None


def build_demo_home(root: Path) -> Path:
    """The demo's job as ``make demo`` leaves it, made in process: three daily checkpoints of
    ``clickstream`` at parallelism 2, and no savepoint; the home is ``root/home`` (the days'
    input is under ``root/in``)."""
    config = StatecoreConfig.resolve(home=str(root / "home"), env={})
    days = generate_clickstream(root / "in", days=3, users=200, events_per_day=600)
    for i, day in enumerate(days):
        rows = pq.read_table(day).sort_by("ts").select(list(Event._fields)).to_pylist()
        run_checkpoint(
            config,
            clickstream.UserActivity(),
            [(row["user_id"], Event(**row)) for row in rows],
            job=clickstream.JOB,
            checkpoint_id=20260101 + i,
            parallelism=2,
        )
    return root / "home"


OTHER_JOB = "clickstream_stream"
"""The second job of the examples' home: the streaming DAG's, beside the demo's."""


def add_other_job(root: Path, home: Path) -> None:
    """Checkpoints 0 and 1 of :data:`OTHER_JOB` in ``home`` (the first day of ``root/in``, in
    two micro-batches), as ``streaming_pipeline`` leaves them on the demo's home."""
    config = StatecoreConfig.resolve(home=str(home), env={})
    day = sorted((root / "in").rglob("*.parquet"))[0]
    rows = pq.read_table(day).sort_by("ts").select(list(Event._fields)).to_pylist()
    for batch, part in enumerate((rows[: len(rows) // 2], rows[len(rows) // 2 :])):
        run_checkpoint(
            config,
            clickstream.UserActivity(),
            [(row["user_id"], Event(**row)) for row in part],
            job=OTHER_JOB,
            checkpoint_id=batch,
            parallelism=2,
        )


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's home with another job beside it: every example runs on a home of several
    jobs."""
    root = tmp_path_factory.mktemp("readme")
    home = build_demo_home(root)
    add_other_job(root, home)
    return home


def test_readme_examples_home_holds_several_jobs(demo_home: Path) -> None:
    """Several jobs, and nothing ``make demo`` does not leave: no savepoint."""
    code, out = cli(demo_home, "sql", "--format", "csv", QUERY_JOBS)
    assert code == 0, out
    assert out.replace('"', "").split() == ["job,checkpoints", "clickstream,3", f"{OTHER_JOB},2"]
    code, out = cli(demo_home, "sql", "--format", "csv", QUERY_SAVEPOINTS)
    assert code == 0, out
    assert out.replace('"', "").split() == ["savepoints", "0"]


QUERY_JOBS = (
    "SELECT job, count(*) AS checkpoints FROM statecore.checkpoints GROUP BY job ORDER BY job"
)
QUERY_SAVEPOINTS = "SELECT count(*) AS savepoints FROM statecore.savepoints"


def cli(home: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["--home", str(home), *args])
    return code, out.getvalue()


def fresh(demo_home: Path, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(demo_home, home)
    return home


def assert_test_exists(block: Block, named: str) -> None:
    path, _, name = named.partition("::")
    assert (REPO / path).is_file(), f"{block.where}: no {path}"
    if name:
        source = (REPO / path).read_text()
        assert re.search(rf"^def {re.escape(name)}\(", source, re.M), f"{block.where}: no {named}"


def test_readme_and_docs_examples_are_all_accounted_for() -> None:
    """Every block runs here or carries a mark; a tested-by mark names a test that exists and
    holds the block (or reads it from its page)."""
    assert len(ALL) >= 27
    unaccounted = []
    for block in ALL:
        runs = block.lang == "python" or (
            block.lang in ("bash", "sh", "shell") and statecore_commands(block) is not None
        )
        if block.mark == "tested-by":
            assert_test_exists(block, block.mark_text)
            source = (REPO / block.mark_text.partition("::")[0]).read_text()
            assert block.code.strip() in source or block.page.name in source, block.where
        elif block.mark == "illustrative":
            assert len(block.mark_text) > 10, f"{block.where}: say why it is illustrative"
            for named in re.findall(r"tests/[\w/]+\.py(?:::\w+)?", block.mark_text):
                assert_test_exists(block, named)  # the tests a reason names are there
        elif not runs:
            unaccounted.append(block.where)
    assert not unaccounted, f"blocks neither run nor marked: {unaccounted}"


def runs_here(block: Block) -> bool:
    """A Python block (unmarked, or with ``run-with``) or an unmarked block of ``statecore``
    commands."""
    if block.lang == "python":
        return block.mark in (None, "run-with")
    return (
        block.lang in ("bash", "sh", "shell")
        and block.mark is None
        and statecore_commands(block) is not None
    )


RUN = {page: [b for b in blocks(page) if runs_here(b)] for page in PAGES}
RUN_PAGES = [page for page, run in RUN.items() if run]


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(REPO)) for p in RUN_PAGES])
def test_page_examples_run_in_order_on_a_home_of_their_own(
    page: Path, demo_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's blocks, top to bottom, in one working folder and a home only this page
    touches: a block finds what its page's earlier blocks made, and nothing of another page."""
    home = fresh(demo_home, tmp_path)
    monkeypatch.chdir(tmp_path)
    for block in RUN[page]:
        if block.lang == "python":
            run_python(block, home, tmp_path)
        else:
            run_statecore_commands(block, home, monkeypatch)


def run_python(block: Block, home: Path, cwd: Path) -> None:
    code = (block.mark_text + "\n" if block.mark == "run-with" else "") + block.code
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, "STATECORE_HOME": str(home), "AIRFLOW_HOME": str(cwd / "airflow")},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert ran.returncode == 0, f"{block.where}:\n{ran.stderr[-5000:]}"


def run_statecore_commands(block: Block, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for args in statecore_commands(block) or []:
        if args[0] == "export":
            for assignment in args[1:]:
                monkeypatch.setenv(*assignment.split("=", 1))
            continue
        code, out = cli(home, *args)
        assert code == 0, f"{block.where}: statecore {shlex.join(args)}\n{out[-5000:]}"


def test_page_examples_a_savepoint_another_page_made_is_not_there(
    demo_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's block that queries a savepoint only another page's block made (docs/sql.md's
    ``--savepoint before-deploy`` once did, made by docs/operations.md) fails; made first on
    its own page, it runs."""
    home = fresh(demo_home, tmp_path)
    query = 'statecore sql --job clickstream --savepoint before-deploy "SELECT 1"\n'
    page = REPO / "docs" / "sql.md"
    with pytest.raises(AssertionError, match="no savepoint named 'before-deploy'"):
        run_statecore_commands(Block(page, 1, "bash", query, None, ""), home, monkeypatch)
    made = "statecore savepoint clickstream --name before-deploy\n" + query
    run_statecore_commands(Block(page, 1, "bash", made, None, ""), home, monkeypatch)
