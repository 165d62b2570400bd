"""Three keyed functions written as PyFlink's documentation writes them, ported by changing
their imports only: each import line of ``statecore.pyflink.X`` stands where PyFlink's
``pyflink.X`` stood (the comment above it), and nothing else differs from PyFlink code."""
