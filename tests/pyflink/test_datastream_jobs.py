"""PyFlink's documented DataStream jobs (tests/pyflink/jobs: PyFlink code but for the imports)
run on Spark, in batch and as a stream over files, with the output Flink gives for the same
input (parallelism 1, as the jobs set it).

How the expectations follow from Flink's semantics:

- STREAMING with parallelism 1 emits in input order; a bounded source ends with
  ``MAX_WATERMARK``, firing every pending event-time timer. The inputs of the timer jobs span
  less than the out-of-orderness plus the timer delay, so in Flink no watermark can pass a
  timer before the end whenever its periodic watermarks come: the output is the same for every
  interleaving. Across keys, the order of what timers emit at the end is PyFlink's own (it
  hands timers to its Python worker in bundles: on PyFlink 2.3.0 ``count_with_timeout`` prints
  ``('hi', 3)`` before ``('hello', 2)``, whose timer is earlier), so those outputs are compared
  per key.
- BATCH sorts the input by key (and timestamp), fires each key's timers at the end of the key
  and emits a ``reduce`` once per key: the lines of one key keep their order, keys come in an
  order of Flink's own (compared sorted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.pyflink.datastream import EmbeddedRocksDBStateBackend, RuntimeExecutionMode
from tests.pyflink.jobs import (
    basic_operations,
    count_with_timeout,
    deduplicate_events,
    event_time_timer,
    state_access,
    ttl_counter,
    word_count,
)

pytestmark = pytest.mark.spark

BATCH = RuntimeExecutionMode.BATCH
STREAMING = RuntimeExecutionMode.STREAMING


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def _input(tmp_path: Path, lines: list[str]) -> str:
    folder = tmp_path / "input"
    folder.mkdir()
    (folder / "part-0.txt").write_text("".join(f"{line}\n" for line in lines))
    return str(folder)


def _per_key(lines: list[str], keys: list[str]) -> dict[str, list[str]]:
    return {k: [line for line in lines if f"'{k}'" in line or f"[{k}," in line] for k in keys}


STATE_ACCESS = [
    "('Alice', 110.1)",
    "('Bob', 30.2)",
    "('Alice', 130.1)",
    "('Bob', 83.3)",
    "('Alice', 143.2)",
    "('Bob', 86.39999999999999)",
    "('Bob', 102.5)",
    "('Alice', 163.29999999999998)",
]
"""Flink's example in STREAMING: each element's running sum, in input order (the floats are
Python's sums, which PyFlink's Python worker computes too)."""


def test_datastream_state_access_streaming_collection(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    result = state_access.state_access_demo()
    assert _lines(capsys) == STATE_ACCESS
    assert result.get_job_id() == "state_access" and result.checkpoints == [0]


def test_datastream_state_access_batch_groups_by_key(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    state_access.state_access_demo(mode=BATCH)
    lines = _lines(capsys)
    assert sorted(lines) == sorted(STATE_ACCESS)
    assert _per_key(lines, ["Alice", "Bob"]) == _per_key(STATE_ACCESS, ["Alice", "Bob"])


def test_datastream_state_access_stream_over_files(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["Alice,110.1", "Bob,30.2", "Alice,20.0", "Bob,53.1", "Alice,13.1", "Bob,3.1"]
    rows += ["Bob,16.1", "Alice,20.1"]
    state_access.state_access_demo(_input(tmp_path, rows))
    assert _lines(capsys) == STATE_ACCESS


def test_datastream_event_time_timer_batch_fires_at_the_end_of_each_key(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flink's example in BATCH: each key's records in timestamp order, then its timers
    (Alice 3000, 5000, 7000, 12000; Bob 4000, 5000, 6000, 9000) fire at the key's end,
    each emitting the key's final sum."""
    event_time_timer.event_timer_timer_demo(mode=BATCH)
    alice = 110.1 + 20.0 + 13.1 + 20.1
    bob = 53.1 + 3.1 + 30.2 + 16.1  # timestamp order: 2000, 3000, 4000, 7000
    expected = [f"('Alice', {alice})"] * 4 + [f"('Bob', {bob})"] * 4
    assert sorted(_lines(capsys)) == sorted(expected)


def test_datastream_event_time_timer_stream_over_files(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Event times 1000..4500 with 2 s out-of-orderness: the watermark stays at or below 2499
    while records come, below every timer (3000, 3500, 4000, 5000, 6500); the end of the
    bounded source fires them all, each with its key's final sum."""
    rows = ["1000,Alice,1.5", "2000,Bob,2.0", "1500,Alice,2.5", "3000,Bob,1.0", "4500,Alice,1.0"]
    event_time_timer.event_timer_timer_demo(_input(tmp_path, rows))
    assert sorted(_lines(capsys)) == ["('Alice', 5.0)"] * 3 + ["('Bob', 3.0)"] * 2


COUNT_WITH_TIMEOUT = ["('hello', 2)", "('hi', 3)"]
"""The docs' function over hi@1000, hello@2000, hi@3000, hello@4000, hi@5000: every timer
(61000..65000) fires after the input ends; only each key's last one (hello 64000, hi 65000)
is not outdated."""


def test_datastream_count_with_timeout_streaming_collection(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    count_with_timeout.count_with_timeout()
    assert sorted(_lines(capsys)) == COUNT_WITH_TIMEOUT


def test_datastream_count_with_timeout_batch_rocksdb_reads_rows_back(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state is a ``Types.ROW``: RocksDB stores a struct and the layer reads it back as a
    ``Row`` (``current[1] += 1`` on a dict would fail)."""
    count_with_timeout.count_with_timeout(mode=BATCH, state_backend=EmbeddedRocksDBStateBackend())
    assert sorted(_lines(capsys)) == COUNT_WITH_TIMEOUT


def test_datastream_count_with_timeout_stream_over_files_rocksdb(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["1000,hi", "2000,hello", "3000,hi", "4000,hello", "5000,hi"]
    count_with_timeout.count_with_timeout(
        _input(tmp_path, rows), state_backend=EmbeddedRocksDBStateBackend()
    )
    assert sorted(_lines(capsys)) == COUNT_WITH_TIMEOUT


TTL_COUNTS = ["+I[flink,1]", "+I[spark,1]", "+I[flink,2]", "+I[state,1]", "+I[flink,3]"]
"""Rows typed ROW_NAMED print as Flink prints a Row; nothing expires within the hour."""


def test_datastream_ttl_counter_streaming_collection(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    ttl_counter.ttl_counter()
    assert _lines(capsys) == TTL_COUNTS


def test_datastream_ttl_counter_batch(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    ttl_counter.ttl_counter(mode=BATCH)
    lines = _lines(capsys)
    assert sorted(lines) == sorted(TTL_COUNTS)
    assert [line for line in lines if "flink" in line] == TTL_COUNTS[0:3:2] + TTL_COUNTS[4:]


def test_datastream_ttl_counter_stream_over_files(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ttl_counter.ttl_counter(_input(tmp_path, ["flink", "spark", "flink", "state", "flink"]))
    assert _lines(capsys) == TTL_COUNTS


DEDUPLICATED = ["(u1,e1)", "(u1,e2)", "(u2,e1)", "(u1,e3)"]
"""Each (user, event) the first time; TUPLE-typed outputs print as Flink prints a tuple."""


def test_datastream_dedup_map_state_streaming_collection(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    deduplicate_events.deduplicate()
    assert _lines(capsys) == DEDUPLICATED


def test_datastream_dedup_map_state_batch(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    deduplicate_events.deduplicate(mode=BATCH)
    lines = _lines(capsys)
    assert sorted(lines) == sorted(DEDUPLICATED)
    assert [line for line in lines if "u1" in line] == ["(u1,e1)", "(u1,e2)", "(u1,e3)"]


def test_datastream_dedup_map_state_stream_over_files(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["u1,e1", "u1,e2", "u1,e1", "u2,e1", "u2,e1", "u1,e3"]
    deduplicate_events.deduplicate(_input(tmp_path, rows))
    assert _lines(capsys) == DEDUPLICATED


WORDS = [
    "To be, or not to be,--that is the question:--",
    "Whether 'tis nobler in the mind to suffer",
]
WORD_COUNTS = ["(to,2)", "(the,2)"] + [
    f"({w},1)"
    for w in ["To", "be,", "or", "not", "be,--that", "is", "question:--", "Whether", "'tis"]
    + ["nobler", "in", "mind", "suffer"]
]
"""BATCH: one final count per word (Flink's batch reduce), as ``(word,count)`` tuples."""


def test_datastream_word_count_batch_collection(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    word_count.word_count(None, None)
    assert sorted(_lines(capsys)) == sorted(WORD_COUNTS)


def test_datastream_word_count_batch_files_to_file_sink(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    output = tmp_path / "output"
    word_count.word_count(_input(tmp_path, WORDS), str(output))
    written = [
        line
        for part in output.rglob("*")
        if part.is_file() and not part.name.startswith((".", "_"))
        for line in part.read_text().splitlines()
    ]
    assert sorted(written) == sorted(WORD_COUNTS)


def test_datastream_word_count_stream_over_files_rolls_each_count(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """STREAMING: a reduce emits the running count of every word as it comes."""
    word_count.word_count(_input(tmp_path, WORDS), None, mode=STREAMING)
    lines = _lines(capsys)
    assert lines[:6] == ["(To,1)", "(be,,1)", "(or,1)", "(not,1)", "(to,1)", "(be,--that,1)"]
    assert lines[-3:] == ["(the,2)", "(mind,1)", "(to,2)", "(suffer,1)"][-3:]
    assert len(lines) == 17 and sorted(set(lines) - {"(to,1)", "(the,1)"}) == sorted(WORD_COUNTS)


def test_datastream_basic_operations_print_as_flinks_example_says(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The outputs in the comments of Flink's ``basic_operations`` example (four executions,
    four jobs), and the flat_map's countries starting with C."""
    basic_operations.basic_operations()
    tel = '{{"name": "{}", "tel": {}, "addr": {{"country": "{}", "city": "{}"}}}}'
    assert _lines(capsys) == [
        "(1, '" + tel.format("Flink", 124, "Germany", "Berlin") + "')",
        "(2, '" + tel.format("hello", 136, "China", "Shanghai") + "')",
        "(3, '" + tel.format("world", 125, "USA", "NewYork") + "')",
        "(4, '" + tel.format("PyFlink", 33, "China", "Hangzhou") + "')",
        "(1, '" + tel.format("Flink", 124, "Germany", "Berlin") + "')",
        "China",
        "China",
        "('Germany', 123)",
        "('China', 135)",
        "('USA', 124)",
        "('China', 167)",
    ]
