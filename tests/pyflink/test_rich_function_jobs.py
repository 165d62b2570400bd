"""PyFlink-style jobs with rich functions run on Spark (tests/pyflink/jobs: PyFlink code but for
the imports), printing what PyFlink prints.

How the expectations follow from Flink's semantics (parallelism 1, as the jobs set it):

- ``count_window_average`` is PyFlink's "Working with State" example; its docs say "the printed
  output will be (1,4) and (1,5)": (1, 3) and (1, 5) average 4, (1, 7) and (1, 4) average
  int(11 / 2) = 5, (1, 2) waits for a second element. The output has no declared type, so
  PyFlink's ``print()`` writes Python's ``str`` of each tuple: ``(1, 4)``. In BATCH the one key
  gives the same lines.
- ``process_function``: a non-keyed ``ProcessFunction`` sees each element's assigned
  timestamp; the watermark (bounded out-of-orderness: the largest timestamp so far minus the
  bound minus 1 ms, and ``Long.MIN_VALUE`` in BATCH) is behind every in-order element; the
  ``filter`` after it keeps orders of 100 or more, in input order.
- ``word_count_file`` in STREAMING: the ``reduce`` emits each word's running count as it comes,
  in input order.
- The keyed process functions of ``count_with_ttl``, ``deduplicate`` and ``session_timeout``
  in their jobs over collections: each count as it comes (nothing expires within 10 s); each
  ``(user, event)`` the first time; a session's count when its last timer fires (every timer
  fires at the end of the input: times 1000..5500 trail the watermark by 1 s, sessions end 5 s
  after a key's last element), the order across keys PyFlink's own (compared sorted).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.pyflink.common import Types
from statecore.pyflink.datastream import (
    EmbeddedRocksDBStateBackend,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from tests.pyflink.jobs import (
    count_window_average,
    count_with_ttl,
    deduplicate,
    process_function,
    session_timeout,
    word_count_file,
)

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyflink.md"
BATCH = RuntimeExecutionMode.BATCH
AVERAGES = ["(1, 4)", "(1, 5)"]
LARGE_ORDERS = ["('o2', 250, 2000, True, 0)", "('o4', 120, 3500, True, 0)"]


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_rich_function_count_window_average_streaming_collection(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    count_window_average.count_window_average()
    assert _lines(capsys) == AVERAGES


def test_rich_function_count_window_average_batch_rocksdb(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    count_window_average.count_window_average(mode=BATCH, backend=EmbeddedRocksDBStateBackend())
    assert _lines(capsys) == AVERAGES


def test_rich_function_count_window_average_stream_over_one_file(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two keys, each with its own state: key 1 averages (3, 5), key 2 (10, 20); key 1's 7 waits.
    The file sits beside other folders (the statecore home), as a user's file does."""
    path = tmp_path / "pairs.txt"
    path.write_text("1,3\n2,10\n1,5\n2,20\n1,7\n")
    count_window_average.count_window_average(str(path))
    assert _lines(capsys) == ["(1, 4)", "(2, 15)"]


@pytest.mark.parametrize("mode", [RuntimeExecutionMode.STREAMING, BATCH])
def test_rich_function_process_function_on_a_stream_without_key(
    spark: Any,
    statecore_home: StatecoreConfig,
    mode: RuntimeExecutionMode,
    capsys: pytest.CaptureFixture[str],
) -> None:
    process_function.process_function_demo(mode=mode)
    assert _lines(capsys) == LARGE_ORDERS


def test_rich_function_word_count_stream_over_one_file(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, a FileSource of one file failed in a stream inside Spark ("Option 'basePath'
    must be a directory"). The name has glob characters: only this file is read."""
    path = tmp_path / "my words [1].txt"
    path.write_text("to be or not to be\nthat is\n")
    (tmp_path / "other.txt").write_text("not read\n")
    word_count_file.word_count(str(path))
    assert _lines(capsys) == [
        "(to,1)",
        "(be,1)",
        "(or,1)",
        "(not,1)",
        "(to,2)",
        "(be,2)",
        "(that,1)",
        "(is,1)",
    ]


FLINK_COUNTS = ["('flink', 1)", "('spark', 1)", "('flink', 2)", "('flink', 3)"]


@pytest.mark.parametrize(
    ("job", "expected", "ordered"),
    [
        (count_with_ttl.count_with_ttl_demo, FLINK_COUNTS, True),
        (deduplicate.deduplicate_demo, ["(u1,e1)", "(u1,e2)", "(u2,e1)"], True),
        (session_timeout.session_timeout_demo, ["('a', 3)", "('b', 2)"], False),
    ],
    ids=["count_with_ttl", "deduplicate", "session_timeout"],
)
def test_rich_function_keyed_process_function_jobs_print_flinks_output(
    spark: Any,
    statecore_home: StatecoreConfig,
    capsys: pytest.CaptureFixture[str],
    job: Any,
    expected: list[str],
    ordered: bool,
) -> None:
    job()
    lines = _lines(capsys)
    assert (lines if ordered else sorted(lines)) == expected


def test_rich_function_uid_names_the_operator_whose_state_is_checkpointed(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([(1, 3), (1, 5)]).key_by(lambda row: row[0]).flat_map(
        count_window_average.CountWindowAverage(),
        output_type=Types.TUPLE([Types.LONG(), Types.LONG()]),
    ).uid("average-by-key").set_max_parallelism(16).print()
    env.execute("uid_job")
    assert _lines(capsys) == ["(1,4)"]
    warehouse = Path(statecore_home.warehouse)
    assert (warehouse / "uid_job" / "average-by-key" / "keyed" / "average").is_dir()
    assert not (warehouse / "uid_job" / "main").exists()


def test_rich_function_doc_example_runs_as_written(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/pyflink.md's "Rich functions" example (PyFlink's CountWindowAverage, STREAMING over a
    collection) prints what its comment says, and its state lives under the uid."""
    text = PAGE.read_text()
    start = text.index("### Rich functions")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None
    code = match.group(1)
    assert "import pyflink" not in code.replace("# from pyflink", "")
    exec(compile(code, str(PAGE), "exec"), {"__name__": "pyflink_doc"})  # the page's own code
    assert _lines(capsys) == AVERAGES
    warehouse = Path(statecore_home.warehouse)
    assert (warehouse / "count_window_average" / "count-window-average" / "keyed").is_dir()
