"""The per-record benchmark of two revisions, side by side: did a change make the loop slower?

``python -m benchmarks.compare_revisions BASE [HEAD] --reps 8`` checks both revisions out in
temporary git worktrees and runs the in-process per-record variants
(``statecore {heap,rocksdb}, in-process (task + function)``, see :mod:`benchmarks.inprocess`) in
child processes, alternating which revision goes first in each repetition, so both see the
same noise of a shared machine. Each child runs a variant ``--inner`` times on fresh state and
keeps its fastest; the report gives each revision's best over all repetitions, their ratio
(HEAD / BASE: above 1 is slower) and the ratio of each repetition's pair.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("heap", "rocksdb")

_CHILD = """
import json, sys
from pathlib import Path
from benchmarks.workload import Workload
from benchmarks import inprocess
workload = Workload.prepare(int(sys.argv[1]), Path(sys.argv[2]))
out = {}
for backend in sys.argv[4:]:
    name = f"statecore {backend}, in-process (task + function)"
    out[backend] = inprocess.run_variant(name, workload, inner=int(sys.argv[3])).seconds
print("RESULT " + json.dumps(out))
"""


def _run_child(tree: Path, events: int, work: Path, inner: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(events), str(work), str(inner), *BACKENDS],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    raise RuntimeError(f"benchmark child in {tree} failed:\n{done.stderr[-3000:]}")


def compare(base: str, head: str, *, reps: int, events: int, inner: int) -> str:
    """Run the comparison; a Markdown report."""
    runs: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        trees = {"base": Path(tmp) / "base", "head": Path(tmp) / "head"}
        for side, rev in (("base", base), ("head", head)):
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", str(trees[side]), rev],
                check=True,
                capture_output=True,
            )
        try:
            work = Path(tmp) / "work"
            for rep in range(reps):
                order = ("base", "head") if rep % 2 == 0 else ("head", "base")
                for side in order:
                    runs[side].append(_run_child(trees[side], events, work, inner))
                    print(rep, side, runs[side][-1], file=sys.stderr, flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                    check=False,
                    capture_output=True,
                )
    lines = [
        f"Per-record in-process benchmark, {events:,} events, {reps} alternating repetitions "
        f"(best of {inner} each): BASE `{base}`, HEAD `{head}`.",
        "",
        "| backend | BASE best (s) | HEAD best (s) | HEAD / BASE | pairs (HEAD / BASE) |",
        "|---|---:|---:|---:|---|",
    ]
    for backend in BACKENDS:
        old = [r[backend] for r in runs["base"]]
        new = [r[backend] for r in runs["head"]]
        pairs = ", ".join(f"{n / o:.2f}" for n, o in zip(new, old, strict=True))
        lines.append(
            f"| {backend} | {min(old):.3f} | {min(new):.3f} | {min(new) / min(old):.3f} | {pairs} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the revision to compare against")
    parser.add_argument("head", nargs="?", default="HEAD")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--inner", type=int, default=3)
    args = parser.parse_args(argv)
    print(compare(args.base, args.head, reps=args.reps, events=args.events, inner=args.inner))


if __name__ == "__main__":
    main()
