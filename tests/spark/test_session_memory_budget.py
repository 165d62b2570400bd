"""The local driver JVM's collector (``statecore.spark.session.local_java_options``): present on
a local master, absent on a cluster's, and the caller's own settings win."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statecore.spark.session import (
    DEFAULT_JAVA_OPTIONS,
    EXTRA_JAVA_OPTIONS,
    LOCAL_GC,
    local_java_options,
    session_conf,
    spark_defaults,
)


def _collectors(options: str) -> list[str]:
    return [o for o in options.split() if o.startswith("-XX:+Use") and o.endswith("GC")]


def test_memory_budget_local_session_sizes_the_driver_jvm(tmp_path: Path) -> None:
    conf = session_conf(master="local[2]", env={}, warehouse=str(tmp_path))
    assert conf[DEFAULT_JAVA_OPTIONS] == LOCAL_GC == "-XX:+UseSerialGC"
    standalone = session_conf(master="spark://127.0.0.1:7077", env={}, warehouse=str(tmp_path))
    assert standalone[DEFAULT_JAVA_OPTIONS] == LOCAL_GC
    for cluster in ("k8s://https://k8s:443", "spark://10.0.0.5:7077", "yarn"):
        # a cluster's driver and executors are sized by whoever runs the cluster
        assert DEFAULT_JAVA_OPTIONS not in session_conf(
            master=cluster, env={}, warehouse=str(tmp_path)
        )


def test_memory_budget_callers_java_options_win(tmp_path: Path) -> None:
    # the caller's own default options replace statecore's
    own = session_conf(
        master="local[2]",
        config={DEFAULT_JAVA_OPTIONS: "-XX:+UseG1GC -Xss2m"},
        env={},
        warehouse=str(tmp_path),
    )
    assert own[DEFAULT_JAVA_OPTIONS] == "-XX:+UseG1GC -Xss2m"
    # a collector named in the extra options (or the JVM's environment) is the only one, as a
    # JVM refuses two; the extra options stay the caller's
    extra = session_conf(
        master="local[2]",
        config={EXTRA_JAVA_OPTIONS: "-XX:+UseParallelGC -XX:MaxHeapFreeRatio=70"},
        env={},
        warehouse=str(tmp_path),
    )
    assert extra[EXTRA_JAVA_OPTIONS] == "-XX:+UseParallelGC -XX:MaxHeapFreeRatio=70"
    assert DEFAULT_JAVA_OPTIONS not in extra
    for variable in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        assert local_java_options(env={variable: "-Xshare:auto -XX:+UseZGC"}) == ""
    # options that name no collector leave statecore's
    dedup = local_java_options({EXTRA_JAVA_OPTIONS: "-XX:+UseStringDeduplication"}, env={})
    assert dedup == LOCAL_GC


def test_memory_budget_session_jvm_has_one_collector(spark: Any) -> None:
    # the run's one session is build_session's at local[2]: the serial collector, statecore's or
    # the one the test run names in SPARK_SUBMIT_OPTS (tests/conftest.py), and no other
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert _collectors(" ".join(arguments)) == [LOCAL_GC], arguments
    assert spark.sparkContext.getConf().get(DEFAULT_JAVA_OPTIONS, "") == local_java_options()


def test_memory_budget_spark_defaults_conf_naming_a_collector_or_default_options_wins(
    tmp_path: Path,
) -> None:
    """A ``spark-defaults.conf`` naming a collector in the driver's extra options, or setting
    the driver's default options (an administrator's), gets no collector of statecore's: a JVM
    refuses two collectors, and statecore's default options would replace the file's."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    defaults = conf_dir / "spark-defaults.conf"
    env = {"SPARK_CONF_DIR": str(conf_dir)}
    assert local_java_options(env=env) == LOCAL_GC  # no file
    defaults.write_text(
        "# an administrator's defaults\nspark.driver.memory 2g\n"
        "spark.driver.extraJavaOptions  -Dkey=value -XX:+UseG1GC\n"
    )
    assert spark_defaults(env)[EXTRA_JAVA_OPTIONS] == "-Dkey=value -XX:+UseG1GC"
    assert local_java_options(env=env) == ""
    assert DEFAULT_JAVA_OPTIONS not in session_conf(
        master="local[2]", env=env, warehouse=str(tmp_path)
    )
    defaults.write_text("spark.driver.defaultJavaOptions=-Xss2m\n")
    assert spark_defaults(env) == {DEFAULT_JAVA_OPTIONS: "-Xss2m"}
    assert local_java_options(env=env) == ""
    defaults.write_text("spark.driver.extraJavaOptions: -Dkey=value\n")
    assert local_java_options(env=env) == LOCAL_GC  # options that name no collector
