"""statecore: Apache Flink's state model for PySpark jobs."""
