"""Checkpoints on the driver: who may write a job, what a run restores, how it completes.

- :mod:`~statecore.checkpoint.coordinator`: plan a run's restore, commit every table, complete
  the checkpoint in the catalog.
- :mod:`~statecore.checkpoint.outputs`: output after completion: a checkpoint's output files
  recorded as pending, committed once it completed, rolled forward by whoever holds the job next.
- :mod:`~statecore.checkpoint.points`: restore points, a completed checkpoint or a savepoint.
- :mod:`~statecore.checkpoint.lock`: the job's lease (one writer at a time, fenced by its
  epoch) and maintenance checkpoints.
- :mod:`~statecore.checkpoint.recover`: refuse a catalog behind the job's Delta tables, and
  rebuild it from their logs.
"""

__all__: list[str] = []
