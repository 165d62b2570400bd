"""The statecore benchmark harness: ``python -m benchmarks.run`` regenerates ``RESULTS.md``.

Every variant runs the same fixed workload (:mod:`benchmarks.workload`), interleaved with the
others so that ratios measured in one run hold on a noisy machine.
"""
