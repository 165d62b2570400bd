"""A seeded chain of random kill points (random phase, nth passage, API and backend; the catalog
per chain): each run retries the checkpoint the previous one died in and dies somewhere else;
at the end 0 updates are lost or doubled. ``STATECORE_FAULT_SEED`` repeats a chain (the seed is
printed), ``STATECORE_FAULT_POINTS`` sets its length (default 6, 3 per catalog, to keep
``make test`` short; ``benchmarks/faults.py`` runs 50 and records them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .chain import chain_seed, run_chain

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("catalog", ["sqlite", "postgres"])
def test_random_kill_chain_loses_and_doubles_nothing(
    catalog: str, fault_home: Any, tmp_path: Path
) -> None:
    config = fault_home(catalog)
    seed = chain_seed()
    points = int(os.environ.get("STATECORE_FAULT_POINTS") or 6) // 2  # half on each catalog
    result = run_chain(config, tmp_path, seed=seed, points=max(points, 1))
    assert result.problems == [], f"seed {seed}: {result.kills}"
