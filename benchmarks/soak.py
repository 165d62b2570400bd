"""A long stream of small micro-batches, in-process: does the cost per micro-batch stay flat?

    python -m benchmarks.soak                       # 1,000 micro-batches -> RESULTS.md section
    python -m benchmarks.soak --micro-batches 200 --no-write

Each micro-batch is one checkpoint of the driver and task steps of ``keyed_process`` (real Delta
tables, a real SQLite catalog, no Spark; ``tests/inprocess.py``), the function and data of
``tests/checkpoint/test_long_stream.py`` (keyed, operator and timer state; 10 events over 24 keys
per micro-batch), with the run's retention (10 checkpoints) and an output table. It reports the
time per micro-batch (first, median, last 50), the catalog's checkpoint rows, the commits a reader
replays to open a table, the ``_delta_log`` entries, and what a log checkpoint costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, log_replay_length
from tests.checkpoint.test_long_stream import CountWithTimeout, commit_output, micro_batch
from tests.inprocess import run_checkpoint

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Long-running stream (soak)"
RETAIN = 10


def _log_entries(uri: str) -> int:
    return len(list(Path(uri, "_delta_log").iterdir()))


def soak(micro_batches: int) -> str:
    from deltalake import DeltaTable

    home = tempfile.mkdtemp(prefix="statecore-soak-")
    config = StatecoreConfig.resolve(env={"STATECORE_HOME": home})
    output = f"{config.warehouse}/soak_out"
    seconds, rows, replays = [], [], []
    with Catalog.connect(config.catalog_url) as catalog:
        for i in range(micro_batches):
            started = time.perf_counter()
            out, record = run_checkpoint(
                config,
                CountWithTimeout(),
                micro_batch(i),
                job="soak",
                checkpoint_id=i,
                watermark=i * 10 - 20,
                retain_checkpoints=RETAIN,
                catalog=catalog,
            )
            commit_output(output, out, i)
            seconds.append(time.perf_counter() - started)
            rows.append(len(catalog.list_checkpoints("soak", with_tables=False)))
            uris = [t.path for t in record.tables] + [output]
            replays.append(max(log_replay_length(u) for u in uris))
    keyed = next(t.path for t in record.tables if t.table_kind == "keyed")
    started = time.perf_counter()
    DeltaTable(keyed).create_checkpoint()
    checkpoint_ms = (time.perf_counter() - started) * 1000
    opens = []
    for _ in range(5):
        started = time.perf_counter()
        DeltaTable(keyed)
        opens.append((time.perf_counter() - started) * 1000)
    first = seconds[1:51]
    middle = seconds[len(seconds) // 2 - 25 : len(seconds) // 2 + 25]
    last = seconds[-50:]
    ms = lambda xs: f"{statistics.median(xs) * 1000:.0f}"  # noqa: E731
    return "\n".join(
        [
            HEADING,
            "",
            f"`python -m benchmarks.soak --micro-batches {micro_batches}` "
            f"({time.strftime('%Y-%m-%d')}, 2 shared cores; in-process, no Spark: the "
            "per-micro-batch work of statecore itself).",
            "",
            "| | value |",
            "|---|---:|",
            f"| micro-batches | {micro_batches} |",
            f"| first micro-batch (creates the tables) | {seconds[0] * 1000:.0f} ms |",
            f"| median of micro-batches 1-50 | {ms(first)} ms |",
            f"| median of the middle 50 | {ms(middle)} ms |",
            f"| median of the last 50 | {ms(last)} ms |",
            f"| last / first-50 median | {statistics.median(last) / statistics.median(first):.2f}"
            " |",
            f"| catalog checkpoint rows (max over the stream) | {max(rows)} (retain {RETAIN}) |",
            f"| commits replayed to open a table (max) | {max(replays)} "
            f"(log checkpoint every {LOG_CHECKPOINT_INTERVAL}) |",
            f"| `_delta_log` entries of the keyed table at the end | {_log_entries(keyed)} |",
            f"| one log checkpoint of the keyed table | {checkpoint_ms:.0f} ms |",
            f"| opening the keyed table at the end (median of 5) | "
            f"{statistics.median(opens):.0f} ms |",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batches", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    section = soak(args.micro_batches)
    print(section)
    if not args.no_write:
        text = RESULTS.read_text() if RESULTS.exists() else ""
        if HEADING in text:  # replace the section (up to the next one)
            before, rest = text.split(HEADING, 1)
            after = rest.split("\n## ", 1)
            text = before + section + ("\n## " + after[1] if len(after) > 1 else "")
        else:
            text = text.rstrip("\n") + "\n\n" + section
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
