"""The demo clickstream: small daily Parquet partitions (``user_id, event_type, amount, ts``)."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["EVENT_TYPES", "generate_clickstream"]

EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")


def generate_clickstream(
    directory: str | Path, *, start: date = date(2026, 1, 1), days: int = 3, users: int = 200,
    events_per_day: int = 2_000, seed: int = 7,
) -> list[Path]:
    """Write ``days`` partitions ``date=YYYY-MM-DD/events.parquet``; the partition folders."""
    rng = random.Random(seed)
    out = []
    for d in range(days):
        day = start + timedelta(days=d)
        midnight = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        step = 86_400 / events_per_day
        ts = [midnight + timedelta(seconds=i * step) for i in range(events_per_day)]
        table = pa.table({
            "user_id": [f"user-{rng.randrange(users)}" for _ in ts],
            "event_type": [rng.choice(EVENT_TYPES) for _ in ts],
            "amount": [round(rng.uniform(1, 200), 2) for _ in ts],
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        })
        folder = Path(directory) / f"date={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / "events.parquet")
        out.append(folder)
    return out
