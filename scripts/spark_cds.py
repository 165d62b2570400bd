"""Build the class-data archive of statecore's Spark driver (Java's AppCDS) for the test run.

A local Spark driver loads some 15,000 classes at start; a JVM given an archive of them maps
them instead of loading, linking and verifying each one. The suite starts a driver JVM for
every kill-point subprocess and every Airflow task that runs a job (dozens of them); with the
archive each starts about 6 seconds sooner and uses about 30 % less CPU (docs/contributing.md).

``python scripts/spark_cds.py --dest build/spark-cds.jsa`` runs a small statecore job (three
checkpoints of the demo's clickstream job, heap and RocksDB, a Delta read through Spark SQL) in
a driver that writes the classes it loaded to the archive at exit
(``-XX:ArchiveClassesAtExit``). The archive only fits the JVM and the classpath that wrote it,
so a key file next to it records both (``java -version``, Spark's JARs, the JARs folder of
:func:`statecore.spark.session.jars_folder`): a second run with the same key does nothing, a
changed key writes a new archive. :func:`statecore.spark.session.session_conf` gives a driver
the archive named by ``STATECORE_SPARK_CDS`` (``make test`` sets it); a JVM that finds it does
not fit starts as it would without it (``-Xshare:auto``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def archive_key() -> str:
    """What the archive depends on: the JVM, Spark's JARs and statecore's JARs folder."""
    import pyspark

    from statecore.spark.session import jars_folder

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True)
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    jars += sorted(jars_folder().glob("*.jar")) if jars_folder().is_dir() else []
    text = java.stderr + "\n".join(f"{j.name} {j.stat().st_size}" for j in jars)
    return hashlib.sha256(text.encode()).hexdigest()


def workload(archive: Path) -> None:
    """The classes a statecore test loads: a keyed job's checkpoints, a Delta read in SQL."""
    from jobs import clickstream
    from statecore.cli.demo import generate_clickstream
    from statecore.config import StatecoreConfig
    from statecore.spark.session import build_session

    spark = build_session(
        master="local[2]",
        app_name="statecore-cds",
        config={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.driver.extraJavaOptions": (
                f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds=error -Xlog:cds+dynamic=error"
            ),
        },
        log_level="ERROR",
    )
    with tempfile.TemporaryDirectory() as home:
        config = StatecoreConfig.resolve(home=home)
        days = generate_clickstream(Path(home) / "data", days=3, users=50, events_per_day=300)
        for i, (folder, backend) in enumerate(zip(days, ("heap", "heap", "rocksdb"), strict=True)):
            events = spark.read.parquet(str(folder))
            clickstream.run(
                spark, events, checkpoint_id=i + 1, parallelism=2, backend=backend, config=config
            )
        tables = sorted(p.parent for p in Path(config.warehouse).rglob("_delta_log"))
        for table in tables[:2]:
            spark.sql(f"SELECT count(*) FROM delta.`{table}`").collect()
    jvm = spark.sparkContext._gateway.proc  # spark-submit's JVM, which writes at exit
    spark.stop()
    jvm.stdin.close()  # the gateway's JVM exits when its stdin closes
    jvm.wait(timeout=600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/spark_cds.py")
    parser.add_argument("--dest", type=Path, default=REPO / "build" / "spark-cds.jsa")
    args = parser.parse_args(argv)
    dest: Path = args.dest.resolve()
    key_file = dest.with_suffix(".key")
    key = archive_key()
    if dest.is_file() and key_file.is_file() and key_file.read_text() == key:
        print(f"{dest}: up to date")
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "STATECORE_SPARK_CDS"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    # a process of its own: the archive is written when its driver JVM exits
    subprocess.run(
        [sys.executable, __file__, "--workload", str(partial)], env=env, cwd=REPO, check=True
    )
    if not partial.is_file():
        print(f"{partial}: the driver wrote no archive; the tests run without one")
        return 0
    partial.replace(dest)
    key_file.write_text(key)
    print(f"{dest}: {dest.stat().st_size // 2**20} MiB")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        workload(Path(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
