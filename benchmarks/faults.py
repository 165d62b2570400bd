"""The seeded random fault chain at length (default 50 kills), timed and recorded.

    python -m benchmarks.faults                     # 50 kills, a new seed -> FAULTS.md
    STATECORE_FAULT_SEED=123 python -m benchmarks.faults --points 60 --catalog postgres

Each kill is a real ``local[2]`` Spark job SIGKILLed at a random point (see
``tests/faults/chain.py``); the recovery is the next run. The catalog is SQLite in a temporary
home, or a fresh schema of ``STATECORE_TEST_POSTGRES_URL`` with ``--catalog postgres``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as ``python benchmarks/faults.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from statecore.config import StatecoreConfig
from tests.faults.chain import chain_seed, run_chain
from tests.faults.harness import LEASE_ENV
from tests.postgres import run_admin

RESULTS = Path(__file__).with_name("FAULTS.md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.faults")
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument("--catalog", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    seed = chain_seed()
    with tempfile.TemporaryDirectory(prefix="statecore-faults-") as work:
        home = Path(work) / "home"
        url = None
        schema = f"statecore_faults_bench_{os.getpid()}"
        base = None
        if args.catalog == "postgres":
            base = sa.make_url(os.environ["STATECORE_TEST_POSTGRES_URL"])
            run_admin(base, f"CREATE SCHEMA {schema}")
            opts = {"options": f"-csearch_path={schema}"}
            url = base.update_query_dict(opts).render_as_string(hide_password=False)
        try:
            config = StatecoreConfig.resolve(home=str(home), catalog_url=url, env=LEASE_ENV)
            result = run_chain(config, Path(work), seed=seed, points=args.points)
        finally:
            if base is not None:
                run_admin(base, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    if not args.no_write:
        lines = [
            "# Fault chain",
            "",
            f"`python -m benchmarks.faults --points {args.points} --catalog {args.catalog}`, "
            f"seed {result.seed}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: "
            f"{len(result.kills)} kills in {result.runs} runs over {result.checkpoints} "
            f"checkpoints, {result.seconds:.0f} s ({result.seconds / max(result.runs, 1):.1f} s "
            f"per run, 2 shared cores); lost or doubled: "
            f"{'none' if not result.problems else len(result.problems)}.",
            "",
            "| # | point | killed | API | backend | checkpoint |",
            "|---:|---|---|---|---|---|",
            *(f"| {i} | {' | '.join(k.split())} |" for i, k in enumerate(result.kills, 1)),
            *(
                ["", "Problems:", "", *(f"- {p}" for p in result.problems)]
                if result.problems
                else []
            ),
            "",
        ]
        RESULTS.write_text("\n".join(lines))
    return 1 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
