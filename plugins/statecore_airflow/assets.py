"""The Asset a job's completed checkpoints are published as (``statecore://<job>``)."""

from __future__ import annotations

from airflow.sdk import Asset

__all__ = ["SCHEME", "checkpoint_asset"]

SCHEME = "statecore"


def checkpoint_asset(job: str) -> Asset:
    """The Asset updated by every completed checkpoint of ``job``."""
    return Asset(name=f"statecore-{job}", uri=f"{SCHEME}://{job}")
