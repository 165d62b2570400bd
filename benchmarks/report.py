"""``RESULTS.md``: the machine, the table of medians, and the issue's targets as ratios."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.measure import Sample

__all__ = [
    "CHECKPOINT",
    "RAW_WRITE",
    "TTL_CLEANUP",
    "Results",
    "flink_section",
    "machine_info",
    "render",
]

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = "checkpoint write, statecore p=1 (state rows/s)"
RAW_WRITE = "raw pyarrow.parquet.write_table, same rows (state rows/s)"
TTL_CLEANUP = "TTL cleanup, statecore p=1, half expired (state rows scanned/s)"


@dataclass
class Results:
    events: int
    repeats: int
    command: str
    samples: list[list[Sample]]  # per repetition, in the order they ran
    failures: dict[str, str]
    machine: dict[str, str]
    started: datetime
    seconds: float
    backends: list[str]
    skipped: dict[str, str] = field(default_factory=dict)  # variant -> why it did not run

    def by_variant(self) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = defaultdict(list)
        for rep in self.samples:
            for s in rep:
                out[s.variant].append(s)
        return out

    def paired_ratio(self, a: str, b: str) -> tuple[float, list[float]] | None:
        """Median over repetitions of events/s of ``a`` divided by ``b`` in the same one."""
        ratios = []
        for rep in self.samples:
            sa = [s for s in rep if s.variant == a]
            sb = [s for s in rep if s.variant == b]
            if sa and sb:
                ratios.append(sa[0].events_per_second / sb[0].events_per_second)
        return (statistics.median(ratios), ratios) if ratios else None

    def paired_memory_ratio(
        self, a: str, b: str, *, pss: bool = False
    ) -> tuple[float, list[float]] | None:
        """Median over repetitions of the peak RSS (``pss``: PSS) of ``a`` divided by ``b``'s in
        the same one."""
        ratios = []
        for rep in self.samples:
            sa = [s.peak_pss if pss else s.peak_rss for s in rep if s.variant == a]
            sb = [s.peak_pss if pss else s.peak_rss for s in rep if s.variant == b]
            if sa and sb and sa[0] and sb[0]:
                ratios.append(sa[0] / sb[0])
        return (statistics.median(ratios), ratios) if ratios else None


def replace_section(text: str, heading: str, section: str) -> str:
    """``text`` with its section under ``heading`` (up to the next ``## `` heading or marker
    comment) replaced by ``section``, or with ``section`` appended."""
    if heading not in text:
        return text.rstrip("\n") + "\n\n" + section
    before, rest = text.split(heading, 1)
    ends = [i + 1 for i in (rest.find("\n## "), rest.find("\n<!--")) if i >= 0]
    return before + section + (rest[min(ends) :] if ends else "")


def _run(args: list[str]) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
        return (out.stdout or out.stderr).strip()
    except OSError:
        return "?"


def machine_info() -> dict[str, str]:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = next(
        (
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "0",
    )
    import pyarrow
    import pyspark

    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": f"{int(mem) / 2**20:.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": _run(["java", "-version"]).splitlines()[0],
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "statecore commit": _run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
        + (
            " + uncommitted changes in statecore/"
            if _run(["git", "-C", str(REPO), "status", "--porcelain", "statecore"])
            else ""
        ),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def _mib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**20:,.0f} MiB"


def _median(samples: Sequence[Sample], get: Callable[[Sample], float]) -> float:
    return float(statistics.median(get(s) for s in samples))


def _table(results: Results) -> list[str]:
    lines = [
        "| variant | events/s (median) | min – max | seconds (median) | runs | peak RSS |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, samples in results.by_variant().items():
        if not samples[0].events:
            continue
        rates = [s.events_per_second for s in samples]
        rss = max((s.peak_rss for s in samples if s.peak_rss), default=None)
        lines.append(
            f"| {variant} | **{_rate(statistics.median(rates))}** | {_rate(min(rates))} – "
            f"{_rate(max(rates))} | {_median(samples, lambda s: s.seconds):.2f} | "
            f"{len(samples)} | {_mib(rss)} |"
        )
    for variant, error in results.failures.items():
        lines.append(f"| {variant} | failed: {error} | | | | |")
    return lines


def _verdict(ok: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "n/a"}[ok]


def _targets(results: Results) -> list[str]:
    by = results.by_variant()
    lines = ["| target | measured (median of paired ratios, each run) | verdict |", "|---|---|---|"]

    def ratio_row(label: str, a: str, b: str, target: float | None, unit: str = "×") -> None:
        found = results.paired_ratio(a, b) if a in by and b in by else None
        if found is None:
            missing = a if a not in by else b
            lines.append(f"| {label} | n/a: no result for *{missing}* | n/a |")
            return
        median, each = found
        shown = f"{median:.2f}×" if unit == "×" else f"{median:.0%}"
        runs = ", ".join(f"{r:.2f}" if unit == "×" else f"{r:.0%}" for r in each)
        verdict = "info" if target is None else _verdict(median >= target)
        lines.append(f"| {label} | {shown} (runs: {runs}) | {verdict} |")

    tws = "Spark transformWithState, RocksDB store, local[2]"
    tws_pandas = "Spark transformWithStateInPandas, RocksDB store, local[2]"
    for backend in ("heap", "rocksdb"):
        e2e = f"statecore {backend}, Spark local[2] end to end"
        if backend in results.backends:
            ratio_row(f"statecore {backend} end to end ≥ 10× transformWithState", e2e, tws, 10)
            ratio_row(
                f"statecore {backend} end to end vs transformWithStateInPandas (info)",
                e2e,
                tws_pandas,
                None,
            )
        else:
            lines.append(
                f"| statecore {backend} end to end ≥ 10× transformWithState | n/a: the "
                f"{backend} backend is not registered yet | n/a |"
            )
    ratio_row(
        "statecore heap in-process (task + function) ≥ 40% of the dict loop",
        "statecore heap, in-process (task + function)",
        "dict loop",
        0.4,
        "%",
    )
    ratio_row(
        "statecore heap in-process (state API loop) vs the dict loop (info)",
        "statecore heap, in-process (state API loop)",
        "dict loop",
        None,
        "%",
    )
    if "rocksdb" in results.backends:
        ratio_row(
            "statecore rocksdb in-process ≥ 60% of raw rocksdict get+put",
            "statecore rocksdb, in-process (task + function)",
            "rocksdict raw get+put",
            0.6,
            "%",
        )
    else:
        lines.append(
            "| statecore rocksdb in-process ≥ 60% of raw rocksdict get+put | n/a: the "
            "rocksdb backend is not registered yet | n/a |"
        )
    for backend in results.backends:
        vectorized = by.get(f"statecore vectorized ({backend}), Spark local[2] end to end", [])
        label = f"vectorized path ({backend}) end to end ≥ 1,000,000 events/s"
        if not vectorized:
            lines.append(f"| {label} | n/a: no result | n/a |")
            continue
        rates = [s.events_per_second for s in vectorized]
        median = statistics.median(rates)
        runs = ", ".join(_rate(r) for r in rates)
        lines.append(
            f"| {label} | {_rate(median)} events/s (runs: {runs}) | "
            f"{_verdict(median >= 1_000_000)} |"
        )
        ratio_row(
            f"vectorized path ({backend}) end to end vs transformWithState (info)",
            f"statecore vectorized ({backend}), Spark local[2] end to end",
            tws,
            None,
        )

    ratio_row(
        "checkpoint write ≥ 70% of the raw Parquet write (state rows/s)",
        CHECKPOINT,
        RAW_WRITE,
        0.7,
        "%",
    )
    cp = by.get(CHECKPOINT, [])
    if cp:
        total = cp[0].extra["snapshot_bytes"]
        planned = cp[0].extra["restore_planned_bytes"] / total
        read = statistics.median(s.extra["restore_read_bytes"] for s in cp) / total
        lines.append(
            f"| restore at p = 4 reads ≤ 30% of the snapshot (subtask 0) | "
            f"{read:.1%} of the snapshot's bytes actually read; {planned:.1%} planned "
            f"(its key groups' share) | {_verdict(read <= 0.3)} |"
        )
    rescales = by.get("rescale 2 -> 3 (statecore, Spark, no input)", [])
    if rescales:
        worst = max(s.extra["rewritten_bytes"] for s in rescales)
        lines.append(
            f"| rescale 2 → 3 rewrites 0 keyed-state bytes | {worst:,} bytes rewritten "
            f"(of {rescales[0].extra['snapshot_bytes']:,}), max over "
            f"{len(rescales)} runs | {_verdict(worst == 0)} |"
        )
    else:
        lines.append("| rescale 2 → 3 rewrites 0 keyed-state bytes | n/a: no result | n/a |")
    cleanups = by.get(TTL_CLEANUP, [])
    if cleanups:
        rates = [s.events_per_second for s in cleanups]
        lines.append(
            f"| TTL cleanup rows/s | {_rate(statistics.median(rates))} rows scanned/s "
            f"(runs: {', '.join(_rate(r) for r in rates)}); "
            f"{cleanups[0].extra['rows_removed']:,} of "
            f"{cleanups[0].extra['rows_scanned']:,} rows removed | info |"
        )
    else:
        lines.append("| TTL cleanup rows/s | n/a: no result | n/a |")
    return lines


def _checkpoint_details(results: Results) -> list[str]:
    cp = results.by_variant().get(CHECKPOINT, [])
    if not cp:
        return []

    def med(key: str) -> float:
        return float(statistics.median(s.extra[key] for s in cp))

    rows = cp[0].extra["state_rows"]
    lines = [
        "## Checkpoint, restore, rescale (details, medians)",
        "",
        f"- State: {rows:,} rows (one per key), {cp[0].extra['files']} key-group files, "
        f"{cp[0].extra['snapshot_bytes']:,} bytes; raw Parquet of the same rows (zstd, one file): "
        f"{cp[0].extra['raw_bytes']:,} bytes.",
        f"- Checkpoint write: {_median(cp, lambda s: s.seconds):.3f} s = "
        f"{rows / _median(cp, lambda s: s.seconds):,.0f} rows/s (writing the key-group files "
        f"{med('snapshot_seconds'):.3f} s, Delta commit + catalog {med('commit_seconds'):.3f} s);"
        f" raw `pyarrow.parquet.write_table`: {med('raw_seconds'):.3f} s = "
        f"{rows / med('raw_seconds'):,.0f} rows/s.",
        f"- Restore, subtask 0 of 4 (key groups {cp[0].extra['restore_key_groups']}): "
        f"{cp[0].extra['restore_keys']:,} keys in {med('restore_seconds'):.3f} s, "
        f"{med('restore_read_bytes'):,.0f} bytes read (`rchar`), "
        f"{cp[0].extra['restore_planned_bytes']:,} bytes in its files; a full restore (p = 1) "
        f"reads {med('full_restore_read_bytes'):,.0f} bytes in {med('full_restore_seconds'):.3f} s."
        " Each file is read once, in one request.",
    ]
    rescales = results.by_variant().get("rescale 2 -> 3 (statecore, Spark, no input)", [])
    if rescales:
        lines.append(
            f"- Rescale 2 → 3 (a checkpoint at p = 3 with no input, restoring every key group): "
            f"{_median(rescales, lambda s: s.seconds):.2f} s on Spark, "
            f"{rescales[0].extra['files']} files after, "
            f"{max(s.extra['rewritten_bytes'] for s in rescales):,} bytes rewritten; the "
            "rescaled checkpoint is read back and its sums verified."
        )
    cleanups = results.by_variant().get(TTL_CLEANUP, [])
    if cleanups:
        c = cleanups[0].extra
        lines.append(
            f"- TTL cleanup of a checkpoint of {c['rows_scanned']:,} rows in "
            f"{c['key_groups']} key groups, every other key expired: "
            f"{_median(cleanups, lambda s: s.seconds):.3f} s = "
            f"{statistics.median(s.events_per_second for s in cleanups):,.0f} rows scanned/s; "
            f"{c['rows_removed']:,} rows removed, {c['rows_kept']:,} kept "
            f"({c['bytes_before']:,} -> {c['bytes_after']:,} bytes), as a maintenance "
            "checkpoint (no VACUUM); read back and verified."
        )
    e2e = results.by_variant().get("statecore heap, Spark local[2] end to end", [])
    if e2e and e2e[0].extra.get("state_bytes"):
        lines.append(
            f"- End-to-end checkpoint (p = 2): {e2e[0].extra['state_rows']:,} rows, "
            f"{e2e[0].extra['state_bytes']:,} bytes in Delta."
        )
    return lines + [""]


JAVA_HASHMAP = "Java Flink 2.3 HashMapStateBackend, MiniCluster p=2"
JAVA_ROCKSDB = "Java Flink 2.3 EmbeddedRocksDBStateBackend, MiniCluster p=2"
JAVA_WINDOW = "Java Flink 2.3 tumbling window sum (HashMapStateBackend), MiniCluster p=2"
MEMORY = "statecore heap, Spark local[2] end to end, own process tree (local defaults)"
MEMORY_SMALL = (
    "statecore heap, Spark local[2] end to end, own process tree (spark.driver.memory=512m)"
)
WINDOW_STATECORE = "statecore tumbling window sum (heap), Spark local[2] end to end"
WINDOW_SPARK = "Spark groupBy(key, window(...)) sum, local[2]"


def flink_section(results: Results) -> list[str]:
    """Issue 43's comparison with Java Flink, every ratio within one repetition (and issue
    42's window sum beside Java Flink and Spark's ``groupBy(window(...))``)."""
    by = results.by_variant()
    lines = [
        "## Java Flink beside statecore (issues 43 and 42), ratios within each repetition",
        "",
        "| comparison | measured (median of paired ratios, each run) | target | verdict |",
        "|---|---|---|---|",
    ]

    def row(label: str, a: str, b: str, target: str, ok: Callable[[float], bool] | None) -> None:
        memory = label.startswith("memory")
        found = None
        if a in by and b in by:
            found = (
                results.paired_memory_ratio(a, b, pss="PSS" in label)
                if memory
                else results.paired_ratio(a, b)
            )
        if found is None:
            why = next((results.skipped[v] for v in (a, b) if v in results.skipped), None)
            missing = a if a not in by else b
            lines.append(
                f"| {label} | n/a: {why or f'no result for *{missing}*'} | {target} | n/a |"
            )
            return
        median, each = found
        runs = ", ".join(f"{r:.2f}" for r in each)
        verdict = "info" if ok is None else _verdict(ok(median))
        lines.append(f"| {label} | {median:.2f}× (runs: {runs}) | {target} | {verdict} |")

    row(
        "heap per record: statecore heap end to end / Java Flink HashMap",
        "statecore heap, Spark local[2] end to end", JAVA_HASHMAP, "≥ 1.0×", lambda r: r >= 1.0,
    )  # fmt: skip
    row(
        "RocksDB per record: statecore rocksdb end to end / Java Flink EmbeddedRocksDB",
        "statecore rocksdb, Spark local[2] end to end", JAVA_ROCKSDB, "≥ 1.0×", lambda r: r >= 1.0,
    )  # fmt: skip
    row(
        "vectorized heap: statecore vectorized (heap) end to end / Java Flink HashMap",
        "statecore vectorized (heap), Spark local[2] end to end", JAVA_HASHMAP, "≥ 2.0×",
        lambda r: r >= 2.0,
    )  # fmt: skip
    row("window sum: statecore window operator / Java Flink window", WINDOW_STATECORE,
        JAVA_WINDOW, "info", None)  # fmt: skip
    row("window sum: Spark groupBy(window(...)) / Java Flink window", WINDOW_SPARK, JAVA_WINDOW,
        "info", None)  # fmt: skip
    row("window sum: statecore window operator / Spark groupBy(window(...))", WINDOW_STATECORE,
        WINDOW_SPARK, "info", None)  # fmt: skip
    row(
        "memory: peak PSS of the heap run's process tree (local defaults) / Java Flink HashMap's",
        MEMORY, JAVA_HASHMAP, "≤ 1.5×", lambda r: r <= 1.5,
    )  # fmt: skip
    row(
        "memory, RSS summed (shared pages counted once per process): that tree / Java Flink's",
        MEMORY, JAVA_HASHMAP, "info", None,
    )  # fmt: skip
    row(
        "memory with spark.driver.memory=512m: peak PSS of that tree / Java Flink HashMap's",
        MEMORY_SMALL, JAVA_HASHMAP, "≤ 1.5×", lambda r: r <= 1.5,
    )  # fmt: skip
    row("speed of the heap run in its own tree: spark.driver.memory=512m / local defaults",
        MEMORY_SMALL, MEMORY, "info", None)  # fmt: skip
    lines += [
        "",
        "Peak PSS (each shared page divided among the processes mapping it: the tree's share of "
        "memory) and peak RSS (summed over the processes) of each process tree, each split by "
        "process at its own peak sample:",
        "",
    ]
    for variant in (MEMORY, MEMORY_SMALL, JAVA_HASHMAP, JAVA_ROCKSDB, JAVA_WINDOW):
        samples = [s for s in by.get(variant, []) if s.peak_rss]
        if samples:
            top = max(samples, key=lambda s: s.peak_rss or 0)
            settings = top.extra.get("settings")
            pss = (
                f"PSS {_mib(top.peak_pss)} ({top.extra.get('memory_pss', '')}); "
                if top.peak_pss
                else ""
            )
            lines.append(
                f"- {variant}: {pss}RSS {_mib(top.peak_rss)} ({top.extra.get('memory', '')})"
                + (f"; session settings {settings}" if settings else "")
            )
    checkpoints = [
        f"{v}: {statistics.median(s.extra['final_checkpoint_seconds'] for s in by[v]):.3f} s"
        for v in (JAVA_HASHMAP, JAVA_ROCKSDB, JAVA_WINDOW)
        if by.get(v)
    ]
    if checkpoints:
        lines.append(
            "- Java Flink's final checkpoint (median, inside its timed run): "
            + "; ".join(checkpoints)
        )
    for variant, why in results.skipped.items():
        lines.append(f"- {variant}: skipped: {why}")
    return lines + [""]


def render(results: Results, method: str, sections: Sequence[str] = ()) -> str:
    m = results.machine
    lines = [
        "# statecore benchmarks",
        "",
        f"Generated by `{results.command}` on {results.started:%Y-%m-%d %H:%M} UTC in "
        f"{results.seconds / 60:.1f} min: {results.events:,} events, {results.repeats} "
        "interleaved repetitions per variant (medians). Do not edit by hand.",
        "",
        "Machine: "
        + "; ".join(f"{k}: {v}" for k, v in m.items())
        + "; load average at end: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
        + " (the machine is shared).",
        "",
        "## Throughput",
        "",
        *_table(results),
        "",
        "## Targets (issue 7), ratios within each repetition",
        "",
        *_targets(results),
        "",
        *sections,
        *_checkpoint_details(results),
        method.strip(),
        "",
    ]
    return "\n".join(lines)


def now() -> datetime:
    return datetime.now(UTC)


def describe(sample: Sample) -> str:
    extra: dict[str, Any] = {k: v for k, v in sample.extra.items() if k != "home"}
    rate = f"{sample.events_per_second:,.0f} events/s, " if sample.events else ""
    return f"{sample.variant}: {sample.seconds:.2f} s, {rate}peak RSS {_mib(sample.peak_rss)}" + (
        f" {extra}" if extra else ""
    )


STREAM_BEGIN, STREAM_END = "<!-- stream:begin -->", "<!-- stream:end -->"
"""The markers of the streaming section (``benchmarks/stream.py``) in a results file."""


def with_stream_section(path: Path, text: str) -> str:
    """``text`` followed by the streaming section of the results file at ``path``, if it has
    one (``benchmarks.run`` rewrites the file; ``benchmarks.stream`` owns that section)."""
    old = path.read_text() if path.exists() else ""
    if STREAM_BEGIN not in old or STREAM_END not in old or STREAM_BEGIN in text:
        return text
    section = STREAM_BEGIN + old.split(STREAM_BEGIN, 1)[1].split(STREAM_END, 1)[0] + STREAM_END
    return text.rstrip("\n") + "\n\n" + section + "\n"
