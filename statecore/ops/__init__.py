"""Operations on a job's state, each a library call, a ``statecore`` command and (for the
recurring ones) an Airflow operator. Each holds the job's lock while it works.

- :mod:`~statecore.ops.savepoint`: write, list and restore savepoints.
- :mod:`~statecore.ops.rescale`: another parallelism, within or past the max parallelism.
- :mod:`~statecore.ops.retention`: expire old checkpoints, VACUUM.
- :mod:`~statecore.ops.ttl_cleanup`: remove expired TTL state as a maintenance checkpoint.
- :mod:`~statecore.ops.repair`: delete a key everywhere, apply SQL to a copy of the state.
- :mod:`~statecore.ops.adopt`: state edited by any engine (Spark SQL, deltalake), validated and
  registered as a savepoint, or refused with each bad row named.
- :mod:`~statecore.ops.preflight`: would a job's states restore from a savepoint?
- :mod:`~statecore.ops.overview`: the catalog as JSON-able rows, for the statecore page in
  Airflow's UI (read only, no lock).
"""

__all__: list[str] = []
