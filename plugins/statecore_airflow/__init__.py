"""statecore for Airflow: a hook for the statecore configuration, operators for savepoint, rescale,
TTL cleanup and retention, and the Assets completed checkpoints are published as.

Airflow puts ``plugins/`` on ``sys.path``, so DAGs import ``statecore_airflow``. Everything here
is thin: the operators only turn their (templated) arguments into one statecore library call.
"""

from __future__ import annotations

from statecore_airflow.assets import checkpoint_asset
from statecore_airflow.hooks import StatecoreHook
from statecore_airflow.operators import (
    RescaleOperator,
    RetentionOperator,
    SavepointOperator,
    TtlCleanupOperator,
)

__all__ = [
    "RescaleOperator",
    "RetentionOperator",
    "SavepointOperator",
    "StatecoreHook",
    "TtlCleanupOperator",
    "checkpoint_asset",
]
