"""A savepoint (a pin) and a rescale within the max parallelism cost metadata, whatever the size of
the state (issue 35): both timed on the test S3 server at two state sizes, 10x apart, beside an
export (the copy a pin replaced) of the same checkpoint.

For each size, a job's checkpoint with one ValueState of ``--keys`` (then 10x as many) keys is
written to ``s3://warehouse/...`` on moto's S3 server (``tests.object_store.s3_server``, on
127.0.0.1) as the coordinator commits it (``tests/ops/statebuilder.py``, max parallelism 128),
its catalog on SQLite. Then, in ``--repeats`` rounds over both states in turn:
``pin_savepoint`` (what ``statecore savepoint JOB`` runs), ``rescale`` to another parallelism
within the max parallelism (what the rescale DAG runs; it pins the checkpoint first), and
``take_savepoint`` (``statecore savepoint JOB --export``: every file copied). The ratios
compare the larger state's median with the smaller's, in one run.

    python -m benchmarks.pin_rescale                 # writes its section of RESULTS.md
    python -m benchmarks.pin_rescale --keys 20000 --repeats 2 --no-write
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import machine_info, replace_section
from tests.object_store.process import running_s3_server

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADING = "## Savepoints (pins) and rescales at two state sizes, S3"


def _state(home: Path, job: str, keys: int) -> tuple[Any, int]:
    """The home (its warehouse on S3) with checkpoint 1 of ``job``: one ValueState of ``keys``
    keys; the checkpoint's bytes."""
    from statecore.config import StatecoreConfig
    from tests.ops.statebuilder import Table, value_rows, write_checkpoint

    warehouse = f"s3://warehouse/{job}-{secrets.token_hex(3)}"
    config = StatecoreConfig.resolve(home=str(home), warehouse=warehouse, env={})
    values = {f"user-{i:09d}": float(i) for i in range(keys)}
    record = write_checkpoint(
        config, job, 1, {"total": Table(value_rows(values))}, parallelism=2, max_parallelism=128
    )
    return config, sum(t.bytes for t in record.tables)


def _timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(keys: int, repeats: int) -> dict[int, dict[str, Any]]:
    """Seconds of each operation at ``keys`` and 10x ``keys``: ``repeats`` rounds, each of
    them running every operation on both states in turn (so the machine's load drifts over
    both alike)."""
    from statecore.catalog import Catalog
    from statecore.ops.rescale import rescale
    from statecore.ops.savepoint import pin_savepoint, take_savepoint

    sizes: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="pin-rescale-") as root:
        homes = {}
        for n in (keys, 10 * keys):
            config, size = _state(Path(root) / f"state{n}", f"state{n}", n)
            homes[n] = config
            sizes[n] = {"bytes": size, "seconds": {"pin": [], "rescale": [], "export": []}}
        for i in range(repeats):
            for n, config in homes.items():
                job, seconds = f"state{n}", sizes[n]["seconds"]
                with Catalog.connect(config.catalog_url) as catalog:
                    seconds["pin"].append(
                        _timed(lambda: pin_savepoint(config, catalog, job, name=f"pin-{i}"))  # noqa: B023
                    )
                    seconds["rescale"].append(
                        _timed(lambda: rescale(config, catalog, job, parallelism=3 + i % 2))  # noqa: B023
                    )
                    seconds["export"].append(
                        _timed(lambda: take_savepoint(config, catalog, job, name=f"export-{i}"))  # noqa: B023
                    )
    return sizes


def render(sizes: dict[int, dict[str, Any]], command: str, started: datetime) -> str:
    small, large = sorted(sizes)
    medians = {
        n: {op: statistics.median(s) for op, s in sizes[n]["seconds"].items()} for n in sizes
    }
    machine = machine_info()
    lines = [
        HEADING,
        "",
        f"`{command}` ({started:%Y-%m-%d}): one ValueState on the test S3 server (moto, "
        f"127.0.0.1), max parallelism 128, parallelism 2, catalog on SQLite; medians of "
        f"{len(sizes[small]['seconds']['pin'])} rounds, each running every operation on both "
        "states in turn. Machine: " + "; ".join(f"{k} {v}" for k, v in machine.items()) + ".",
        "",
        "| operation | "
        + " | ".join(f"{n:,} keys ({sizes[n]['bytes'] / 1024**2:.1f} MiB)" for n in (small, large))
        + " | larger / smaller |",
        "|---|---:|---:|---:|",
    ]
    names = {
        "pin": "savepoint (pin, `statecore savepoint JOB`)",
        "rescale": "rescale within the max parallelism (pins first)",
        "export": "export (`--export`, every file copied)",
    }
    for op, name in names.items():
        a, b = medians[small][op], medians[large][op]
        lines.append(f"| {name} | {a * 1000:,.0f} ms | {b * 1000:,.0f} ms | {b / a:.2f}x |")
    state_ratio = sizes[large]["bytes"] / sizes[small]["bytes"]
    pin_ratio = medians[large]["pin"] / medians[small]["pin"]
    rescale_ratio = medians[large]["rescale"] / medians[small]["rescale"]
    verdict = "within" if max(pin_ratio, rescale_ratio) <= 2 else "**not within**"
    lines += [
        "",
        f"The state {state_ratio:.1f}x larger: a pin took {pin_ratio:.2f}x and a rescale "
        f"{rescale_ratio:.2f}x the time ({verdict} issue 35's 2x), an export "
        f"{medians[large]['export'] / medians[small]['export']:.2f}x.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000, help="keys of the smaller state")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print, do not write RESULTS.md")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.pin_rescale" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    started = datetime.now(UTC)
    with running_s3_server(["warehouse"], environ=True):
        sizes = measure(args.keys, args.repeats)
    section = render(sizes, command, started)
    print(section)
    if not args.no_write:
        RESULTS.write_text(replace_section(RESULTS.read_text(), HEADING, section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
