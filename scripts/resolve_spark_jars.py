"""Add the Delta Lake and S3A JARs that cluster-side Spark SQL needs to pyspark's ``jars/``.

Run by the Dockerfile's build stage, after the lock is installed (the image cannot be built
here). Resolved the way ``spark-submit --packages`` does (Ivy, with transitive dependencies),
then copied into pyspark's ``jars/``, skipping any artifact pyspark already ships so Spark's own
versions stay the only ones on the classpath. Reads the build arguments from the environment:

    DELTA_VERSION         Delta Lake release, e.g. 4.4.1
    DELTA_SPARK_ARTIFACT  delta-spark_<spark minor>_2.13; must match the installed pyspark
    HADOOP_AWS_VERSION    optional; default: the Hadoop of pyspark's hadoop-client JARs

    python scripts/resolve_spark_jars.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

__all__ = ["artifact_id", "main"]


def artifact_id(name: str) -> str:
    """``delta-storage-4.4.1.jar`` -> ``delta-storage``."""
    return re.sub(r"-\d[\w.+-]*\.jar$", "", name)


def main() -> None:
    spark_home = Path(pyspark.__file__).parent
    jars = spark_home / "jars"
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    artifact = os.environ["DELTA_SPARK_ARTIFACT"]
    if not artifact.startswith(f"delta-spark_{spark_minor}_"):
        sys.exit(
            f"{artifact} does not match pyspark {pyspark.__version__} "
            f"(want delta-spark_{spark_minor}_2.13)"
        )
    hadoop = os.environ.get("HADOOP_AWS_VERSION") or _hadoop_version(jars)
    delta = os.environ["DELTA_VERSION"]
    packages = [
        f"io.delta:{artifact}:{delta}",
        f"io.delta:delta-storage:{delta}",
        f"org.apache.hadoop:hadoop-aws:{hadoop}",
    ]
    print("resolving", *packages, flush=True)

    ivy = Path(tempfile.mkdtemp())
    noop = ivy / "noop.py"
    noop.write_text("")
    subprocess.run(
        [
            str(spark_home / "bin" / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            f"spark.jars.ivy={ivy}",
            "--packages",
            ",".join(packages),
            str(noop),
        ],
        check=True,
    )

    shipped = {artifact_id(p.name) for p in jars.glob("*.jar")}
    for jar in sorted((ivy / "jars").glob("*.jar")):
        # Ivy names them group_artifact-version
        name = jar.name.split("_", 1)[1] if "_" in jar.name else jar.name
        if artifact_id(name) in shipped:
            print("  already in pyspark:", name)
            continue
        shutil.copy2(jar, jars / name)
        print("  added:", name)
    shutil.rmtree(ivy)


def _hadoop_version(jars: Path) -> str:
    api = next(p.name for p in jars.glob("hadoop-client-api-*.jar"))
    match = re.match(r"hadoop-client-api-(.+)\.jar", api)
    assert match is not None, api
    return match.group(1)


if __name__ == "__main__":
    main()
