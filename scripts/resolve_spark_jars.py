"""Resolve the JARs of ``jars/pom.xml`` (Delta Lake for Spark 4.2, the Kafka source, S3A:
hadoop-aws and the AWS SDK's S3 client) into one folder, with Maven.

The pom is the one place the JVM side is pinned: ``make jars`` (a step of ``make test``) runs
this into ``.venv/jars``, where :func:`statecore.spark.session.build_session` finds them, and the
Dockerfile runs it with ``--into-pyspark`` so the image's Spark has them on every
classpath. ``mvn dependency:copy-dependencies`` resolves them with their transitive
dependencies; any artifact pyspark already ships is dropped, so Spark's own versions stay the
only ones on the classpath. A stamp in the folder records the pom's hash and the JARs it added:
a second run with the same pom does nothing (no Maven, no download).

    python scripts/resolve_spark_jars.py                 # into .venv/jars (sys.prefix/jars)
    python scripts/resolve_spark_jars.py --dest DIR
    python scripts/resolve_spark_jars.py --into-pyspark   # the image
    python scripts/resolve_spark_jars.py --kafka-broker   # the tests' broker

``--kafka-broker`` resolves ``jars/kafka-broker/pom.xml`` (the Kafka broker that ``tests/kafka``
starts on loopback) into ``.venv/kafka-broker-jars`` instead: a folder of its own, never on
Spark's classpath, kept whole (its Scala and Jackson are the broker's, not pyspark's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pyspark

__all__ = ["artifact_id", "main", "pom_properties"]

POM = Path(__file__).resolve().parents[1] / "jars" / "pom.xml"
KAFKA_BROKER_POM = POM.parent / "kafka-broker" / "pom.xml"
KAFKA_BROKER_JARS = "kafka-broker-jars"
"""The folder of the tests' Kafka broker, beside ``jars`` in the venv."""
STAMP = ".statecore-jars.json"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def artifact_id(name: str) -> str:
    """``delta-storage-4.4.1.jar`` -> ``delta-storage``."""
    return re.sub(r"-\d[\w.+-]*\.jar$", "", name)


def pom_properties(pom: Path) -> dict[str, str]:
    """The ``<properties>`` of ``pom``."""
    root = ET.parse(pom).getroot()
    props = root.find("m:properties", _NS)
    assert props is not None, f"{pom} has no <properties>"
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in props}


def check_pom(pom: Path) -> None:
    """Exit unless the pom's Spark and Delta match the installed pyspark and delta-spark."""
    props = pom_properties(pom)
    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    artifact = props["delta.artifact"]
    if not artifact.startswith(f"delta-spark_{spark_minor}_"):
        sys.exit(
            f"{artifact} does not match pyspark {pyspark.__version__} "
            f"(want delta-spark_{spark_minor}_2.13)"
        )
    if props["spark.version"] != pyspark.__version__:
        sys.exit(f"{pom}: spark.version {props['spark.version']} is not {pyspark.__version__}")
    try:
        python_delta = metadata.version("delta-spark")
    except metadata.PackageNotFoundError:
        return
    if props["delta.version"] != python_delta:
        sys.exit(f"{pom}: delta.version {props['delta.version']} is not {python_delta}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pom", type=Path, default=POM)
    parser.add_argument("--dest", type=Path, default=Path(sys.prefix) / "jars")
    parser.add_argument("--into-pyspark", action="store_true", help="into pyspark's own jars/")
    parser.add_argument(
        "--kafka-broker",
        action="store_true",
        help=f"the tests' Kafka broker ({KAFKA_BROKER_POM.name} of jars/kafka-broker) into "
        f"{KAFKA_BROKER_JARS}/ beside the default --dest, every JAR kept",
    )
    args = parser.parse_args(argv)
    spark_jars = Path(pyspark.__file__).parent / "jars"
    if args.kafka_broker:
        args.pom = KAFKA_BROKER_POM
        dest: Path = args.dest.parent / KAFKA_BROKER_JARS
    else:
        check_pom(args.pom)
        dest = spark_jars if args.into_pyspark else args.dest
    profiles: list[str] = []
    digest = hashlib.sha256(args.pom.read_bytes() + repr(profiles).encode()).hexdigest()
    stamp = dest / STAMP
    previous = json.loads(stamp.read_text()) if stamp.exists() else {}
    if previous.get("pom_sha256") == digest and all(
        (dest / jar).exists() for jar in previous.get("jars", [])
    ):
        print(f"{dest}: up to date with {args.pom} ({len(previous['jars'])} JARs)")
        return
    if shutil.which("mvn") is None:
        sys.exit("Maven (mvn) is needed to resolve the JARs: apt-get install maven")

    with tempfile.TemporaryDirectory(prefix="statecore-jars-") as tmp:
        command = [
            "mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(args.pom),
            "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", "-DincludeScope=runtime",
        ]  # fmt: skip
        if profiles:
            command.append("-P" + ",".join(profiles))
        print("resolving", args.pom, *(f"(profile {p})" for p in profiles), flush=True)
        subprocess.run(command, check=True)
        dest.mkdir(parents=True, exist_ok=True)
        for jar in previous.get("jars", []):
            (dest / jar).unlink(missing_ok=True)
        shipped = (
            set() if args.kafka_broker else {artifact_id(p.name) for p in spark_jars.glob("*.jar")}
        )
        added = []
        for jar in sorted(Path(tmp).glob("*.jar")):
            if artifact_id(jar.name) in shipped:
                continue  # pyspark's own version stays
            shutil.copy2(jar, dest / jar.name)
            added.append(jar.name)
    stamp.write_text(json.dumps({"pom_sha256": digest, "profiles": profiles, "jars": added}))
    size = sum((dest / jar).stat().st_size for jar in added)
    print(f"{dest}: {len(added)} JARs, {size / 1e6:.1f} MB", *added, sep="\n  ")


if __name__ == "__main__":
    main()
