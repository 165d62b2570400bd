"""A seeded chain of random kills: each subprocess retries the checkpoint the previous one died
in, goes on, and dies at a random point of its own, with a random API and backend.

The seed comes from ``STATECORE_FAULT_SEED`` (printed either way); a chain of ``points`` kills
ends with a run that is not armed, and the outcome is compared with pandas over every
checkpoint (the deterministic suite compares the same job with clean runs). Used by the slow
test ``test_random_kills.py`` and by ``benchmarks/faults.py``.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.config import StatecoreConfig

from .harness import RECOVERY_RETRY_SECONDS, run_job
from .scenario import APIS, BACKENDS, JOB, differences, expected_outcome, read_outcome

SEED_ENV = "STATECORE_FAULT_SEED"
CHECKPOINTS_PER_RUN = 3

# (point, largest nth): per-checkpoint points fire in one of a run's checkpoints; task points
# count a worker's batches and files over the checkpoints it runs.
POINTS: tuple[tuple[str, int], ...] = (
    ("catalog:begin", CHECKPOINTS_PER_RUN),
    ("task:process", 8),
    ("task:snapshot", 40),
    ("output:commit:before", CHECKPOINTS_PER_RUN),
    ("output:commit:after", CHECKPOINTS_PER_RUN),
    ("commit:keyed:seqs:before", CHECKPOINTS_PER_RUN),
    ("commit:keyed:seqs:after", CHECKPOINTS_PER_RUN),
    ("commit:keyed:total:before", CHECKPOINTS_PER_RUN),
    ("commit:keyed:total:after", CHECKPOINTS_PER_RUN),
    ("commit:operator:processed:before", CHECKPOINTS_PER_RUN),
    ("commit:operator:processed:after", CHECKPOINTS_PER_RUN),
    ("catalog:states", CHECKPOINTS_PER_RUN),
    ("catalog:complete:before", CHECKPOINTS_PER_RUN),
    ("catalog:complete:after", CHECKPOINTS_PER_RUN),
)
_DONE = re.compile(r"^checkpoint (\d+) done$", re.MULTILINE)


def chain_seed() -> int:
    return int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**31))


@dataclass
class ChainResult:
    seed: int
    kills: list[str] = field(default_factory=list)  # "point kill api backend cp" per kill
    runs: int = 0
    checkpoints: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def run_chain(
    config: StatecoreConfig,
    workdir: Path,
    *,
    seed: int,
    points: int,
    report: Callable[[str], None] = print,
) -> ChainResult:
    """Kill ``points`` runs at random points, recovering each time; then compare."""
    rng = random.Random(seed)
    result = ChainResult(seed)
    report(f"fault chain: seed {seed} ({SEED_ENV}={seed} repeats it), {points} kills")
    start = time.monotonic()
    next_id = 1
    while len(result.kills) < points:
        point, most = rng.choice(POINTS)
        nth = rng.randint(1, most)
        kill = rng.choice(("driver", "worker")) if point.startswith("task:") else "driver"
        api, backend = rng.choice(APIS), rng.choice(BACKENDS)
        ids = tuple(range(next_id, next_id + CHECKPOINTS_PER_RUN))
        killed = run_job(
            config,
            api=api,
            backend=backend,
            checkpoints=ids,
            point=f"{point}:{nth}",
            kill=kill,
            marker=workdir / f"fired-{result.runs}",
            retry_for=RECOVERY_RETRY_SECONDS,
        )
        result.runs += 1
        done = [int(d) for d in _DONE.findall(killed.log)]
        if killed.returncode not in (0, -9):
            result.problems.append(
                f"run {result.runs} ({point}:{nth}) failed: {killed.log[-2000:]}"
            )
            break
        if killed.fired:
            where = f"cp{done[-1] + 1 if done else ids[0]}" if kill == "driver" else "retried"
            result.kills.append(f"{point}:{nth} {kill} {api} {backend} {where}")
            report(f"kill {len(result.kills)}: {result.kills[-1]} ({killed.seconds:.0f} s)")
        next_id = done[-1] + 1 if done else ids[0]  # a retry of the checkpoint it died in
        problems = progress_problems(config)
        if problems:
            result.problems += [
                f"after run {result.runs} ({point}:{nth} {kill}): {p}" for p in problems
            ]
            break
    if result.problems:
        result.seconds = time.monotonic() - start
        return result
    final = run_job(
        config,
        api=rng.choice(APIS),
        backend=rng.choice(BACKENDS),
        checkpoints=(next_id,),
        point=None,
        kill="driver",
        marker=workdir / "final",
        retry_for=RECOVERY_RETRY_SECONDS,
    )
    result.runs += 1
    if final.returncode != 0:
        result.problems.append(f"the last run failed: {final.log[-2000:]}")
    result.checkpoints = next_id
    result.seconds = time.monotonic() - start
    if not result.problems:
        expected = expected_outcome(tuple(range(1, next_id + 1)))
        result.problems += differences(read_outcome(config), expected)
    report(
        f"fault chain: seed {seed}: {len(result.kills)} kills in {result.runs} runs, "
        f"{result.checkpoints} checkpoints, {result.seconds:.0f} s, "
        f"{len(result.problems)} problems"
    )
    return result


def _output_of(checkpoint: int) -> set[tuple[str, int, int, int]]:
    """The output rows checkpoint ``checkpoint`` of the chain adds."""
    before = expected_outcome(tuple(range(1, checkpoint))).output if checkpoint > 1 else []
    return set(expected_outcome(tuple(range(1, checkpoint + 1))).output) - set(before)


def progress_problems(config: StatecoreConfig) -> list[str]:
    """After a kill: the latest completed checkpoint holds exactly the updates of the
    checkpoints up to it, and the output table holds theirs once, but for those whose output
    commit is still pending (killed after completing, before or in its output's commit: the
    next run rolls it forward), plus, at most, the rows of the checkpoint in progress."""
    with Catalog.connect(config.catalog_url) as catalog:
        if JOB not in {j.name for j in catalog.list_jobs()}:
            return []
        latest = catalog.latest_checkpoint(JOB, kinds=(CheckpointKind.CHECKPOINT,))
        pending = {p.checkpoint_id for p, _ in catalog.pending_outputs(JOB)}
    if latest is None:
        return []
    upto = latest.checkpoint_id
    actual, expected = read_outcome(config), expected_outcome(tuple(range(1, upto + 1)))
    completed = {c for c, s in actual.statuses.items() if s == CheckpointStatus.COMPLETED.name}
    problems = differences(
        replace(actual, output=expected.output, statuses=expected.statuses), expected
    )
    if completed != set(range(1, upto + 1)):
        problems.append(f"completed checkpoints {sorted(completed)}, expected 1..{upto}")
    rows = actual.output
    allowed = set(expected_outcome(tuple(range(1, upto + 2))).output)
    not_yet = {row for c in pending if c <= upto for row in _output_of(c)}
    if len(set(rows)) != len(rows):
        problems.append(f"output rows doubled: {len(rows) - len(set(rows))}")
    if not set(expected.output) - not_yet <= set(rows) <= allowed:
        lost = sorted(set(expected.output) - not_yet - set(rows))[:5]
        problems.append(f"output lost {lost}, unexpected {sorted(set(rows) - allowed)[:5]}")
    return problems
