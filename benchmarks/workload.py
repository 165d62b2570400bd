"""The fixed workload of every variant: a keyed running sum (do not tune it).

``n`` events over 100,000 keys ``"user-" + str(i % 100000)`` in an order shuffled by numpy's
``default_rng(42)``, ``value`` an int in [0, 100) drawn from the same generator, ``seq`` 0..n-1.
Per event a variant reads the key's sum (default 0), adds ``value``, writes it back and emits
``(key, value, new_sum)``. Every run is verified against pandas: the final sum of every key, and
(where the output is kept) the number of output rows, the per-key maximum of ``new_sum`` and the
checksum ``sum(new_sum)``, which only matches when each key's events ran in ``seq`` order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["KEYS", "KEY_GROUP", "MAX_PARALLELISM", "Workload", "VerificationError"]

KEYS = 100_000
MAX_PARALLELISM = 128  # statecore's default for parallelism <= 85
KEY_GROUP = "__kg"  # in-process variants only: the key group, computed before timing


class VerificationError(AssertionError):
    """A variant's result differs from the pandas reference."""


@dataclass(frozen=True)
class Workload:
    """The events of one size, their Parquet file and the pandas reference results."""

    events: int
    root: Path  # the workload's folder; the Parquet file is alone in ``root / "input"``

    @property
    def input_dir(self) -> Path:
        return self.root / "input"

    @property
    def parquet_path(self) -> Path:
        return self.input_dir / "events.parquet"

    @classmethod
    def prepare(cls, events: int, work: Path) -> Workload:
        """Generate the events once per size and keep them as one Parquet file."""
        workload = cls(events, work / f"events-{events}")
        if not workload.parquet_path.exists():
            workload.input_dir.mkdir(parents=True, exist_ok=True)
            tmp = workload.parquet_path.with_suffix(".tmp")
            pq.write_table(generate(events), tmp)
            tmp.rename(workload.parquet_path)
        return workload

    def table(self) -> pa.Table:
        """The events as an Arrow table: ``key`` (string), ``value`` and ``seq`` (int64)."""
        return pq.read_table(self.parquet_path)

    @cached_property
    def reference(self) -> Reference:
        frame = self.table().to_pandas()
        sums = frame.groupby("key", sort=False)["value"].sum()
        running = frame.sort_values("seq").groupby("key", sort=False)["value"].cumsum()
        return Reference(dict(zip(sums.index, sums.to_numpy().tolist())), int(running.sum()))


@dataclass(frozen=True)
class Reference:
    sums: dict[str, int]  # final sum per key
    checksum: int  # sum of every emitted new_sum, with each key's events in seq order

    def check_sums(self, variant: str, sums: dict[str, int]) -> None:
        if sums != self.sums:
            wrong = [k for k in self.sums if sums.get(k) != self.sums[k]][:3]
            raise VerificationError(
                f"{variant}: final sums differ from pandas for {len(wrong)}+ keys, e.g. "
                + ", ".join(f"{k}: {sums.get(k)} != {self.sums[k]}" for k in wrong)
                + f" ({len(sums)} keys vs {len(self.sums)})"
            )

    def check_output(self, variant: str, output: pa.Table, events: int) -> None:
        """Check a full output table with columns ``key``, ``value``, ``new_sum``."""
        if output.num_rows != events:
            raise VerificationError(f"{variant}: {output.num_rows} output rows, expected {events}")
        frame = output.select(["key", "value", "new_sum"]).to_pandas()
        grouped = frame.groupby("key", sort=False)
        self.check_sums(f"{variant} (max new_sum)", _as_dict(grouped["new_sum"].max()))
        self.check_sums(f"{variant} (value column)", _as_dict(grouped["value"].sum()))
        checksum = int(frame["new_sum"].sum())
        if checksum != self.checksum:
            raise VerificationError(
                f"{variant}: sum(new_sum) = {checksum}, expected {self.checksum} (events of a key "
                "not processed in seq order?)"
            )


def _as_dict(series: pd.Series) -> dict[str, int]:
    return dict(zip(series.index, series.to_numpy().tolist()))


def generate(events: int) -> pa.Table:
    """The events, deterministically: same ``events`` -> same table."""
    rng = np.random.default_rng(42)
    order = rng.permutation(events)
    values = rng.integers(0, 100, size=events, dtype=np.int64)
    keys = pa.array([f"user-{i}" for i in range(KEYS)], pa.string())
    return pa.table(
        {
            "key": keys.take(pa.array(order % KEYS)),
            "value": pa.array(values),
            "seq": pa.array(np.arange(events, dtype=np.int64)),
        }
    )


def with_key_groups(table: pa.Table) -> pa.Table:
    """``table`` plus each key's key group, as Spark computes it in the shuffle."""
    from statecore.keygroups import assign_to_key_group

    keys = table.column("key").combine_chunks().dictionary_encode()
    groups = pa.array(
        [assign_to_key_group(k, MAX_PARALLELISM) for k in keys.dictionary.to_pylist()], pa.int32()
    )
    return table.append_column(KEY_GROUP, groups.take(keys.indices))
