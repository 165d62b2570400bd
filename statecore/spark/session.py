"""The one Spark session builder of statecore: jobs, DAG tasks, tests and benchmarks start
their sessions here.

:func:`build_session` adds to the caller's settings:

- **Delta Lake** (``delta-spark``): its SQL extension and catalog, and the JARs of
  ``jars/pom.xml`` (``make jars`` resolves them into ``<venv>/jars``; ``STATECORE_JARS`` names
  another folder) on the classpath. Where the JARs are in neither that folder nor Spark's own
  ``jars/`` (the image puts them there), the session starts without Delta: a local job still
  runs (statecore writes its tables with delta-rs), and :func:`require_delta` says how to get
  them.
- **Loopback**: a local session (``local[...]``, or a standalone master on this machine) binds its
  driver to 127.0.0.1, as ``SPARK_LOCAL_IP`` does for the Makefile's processes.
- **S3A**, when the warehouse is on ``s3://``: the ``s3``/``s3a`` file systems, endpoint, region
  and path-style access from the environment (:func:`s3a_conf`); credentials stay in the
  environment, where S3A reads them.
- **A JVM sized for a local run** (:func:`local_java_options`): on a local master, unless the
  caller's options name a garbage collector, the driver's JVM (which is also the executor)
  starts with the serial collector (no G1 remembered sets) in
  ``spark.driver.defaultJavaOptions``; the caller's ``spark.driver.extraJavaOptions`` come after
  it, and a caller's own ``spark.driver.defaultJavaOptions`` replaces it. docs/performance.md
  ("Memory") has the measurements.
- ``spark.sql.session.timeZone`` UTC (Delta's timestamps are UTC) unless the caller sets it.
- **The workers' Python** (:func:`worker_python`): where the Python workers run on this machine,
  the interpreter that runs the driver, so ``.venv/bin/python job.py`` works without an
  activated venv (Spark's own default is ``python3`` from ``PATH``, which may lack statecore);
  an explicit ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` wins.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statecore.config import StatecoreConfig
from statecore.errors import ConfigError

__all__ = [
    "DELTA_CATALOG",
    "DEFAULT_JAVA_OPTIONS",
    "DELTA_EXTENSION",
    "EXTRA_JAVA_OPTIONS",
    "LOCAL_GC",
    "LOOPBACK",
    "PYTHON_CONF",
    "build_session",
    "delta_jars",
    "has_delta",
    "is_local_master",
    "jars_folder",
    "local_java_options",
    "require_delta",
    "s3a_conf",
    "session_conf",
    "spark_defaults",
    "worker_python",
]

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
LOOPBACK = "127.0.0.1"
LOCAL_GC = "-XX:+UseSerialGC"
"""The collector of a local driver's JVM (:func:`local_java_options`)."""
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
EXTRA_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_SETTING = re.compile(r"([^\s=:]+)\s*[\s=:]\s*(.*)")
"""A line of ``spark-defaults.conf``: its key, then whitespace, ``=`` or ``:``, then its value."""
_JAVA_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")
PYTHON_CONF = "spark.pyspark.python"
"""The setting naming the interpreter of Spark's Python workers (``PYSPARK_PYTHON``)."""
_HOW_TO_GET_JARS = (
    "run `make jars` (Maven resolves jars/pom.xml into .venv/jars; STATECORE_JARS names another "
    "folder), or give Spark spark.jars.packages=io.delta:delta-spark_4.2_2.13:4.4.0"
)


def jars_folder(env: Mapping[str, str] | None = None) -> Path:
    """Where ``make jars`` puts the JARs: ``STATECORE_JARS``, else ``<venv>/jars``."""
    env = os.environ if env is None else env
    return Path(env.get("STATECORE_JARS") or Path(sys.prefix) / "jars")


def delta_jars(folder: Path) -> list[Path]:
    """The JARs of ``folder`` when it holds Delta Lake's (``delta-spark_*.jar``), else none."""
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    return jars if any(j.name.startswith("delta-spark_") for j in jars) else []


def _spark_ships_delta() -> bool:
    import pyspark

    return any((Path(pyspark.__file__).parent / "jars").glob("delta-spark_*.jar"))


def is_local_master(master: str) -> bool:
    """``local``, ``local[...]``, or a standalone master on this machine.

    >>> [is_local_master(m) for m in ("local[2]", "spark://127.0.0.1:7077", "k8s://https://k")]
    [True, True, False]
    """
    if master.startswith("local"):
        return True
    host = master.removeprefix("spark://").split(":")[0]
    return master.startswith("spark://") and host in ("127.0.0.1", "localhost")


def s3a_conf(warehouse: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings to read an ``s3://`` (or ``s3a://``) warehouse with Hadoop's S3A (hadoop-aws
    and the AWS SDK's S3 client, which ``make jars`` puts in ``.venv/jars``): both schemes are
    S3A (``fs.s3.impl``, and ``fs.AbstractFileSystem.s3.impl`` for Structured Streaming's
    checkpoints), so the warehouse URL delta-rs and DuckDB read (``s3://``) is the one Spark
    reads; ``STATECORE_S3_ENDPOINT`` or ``AWS_ENDPOINT_URL(_S3)``, ``AWS_REGION`` and
    ``STATECORE_S3_PATH_STYLE`` (default: path style when an endpoint is given, as S3-compatible
    servers want). Empty for a warehouse elsewhere.

    No credentials: S3A's default chain reads ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``
    and ``AWS_SESSION_TOKEN`` from the JVM's environment (the driver's is this process's; a
    cluster's executors get theirs from ``spark.executorEnv.AWS_*``), then an instance's or
    pod's role. A setting would put them on spark-submit's command line and in Spark's conf.

    >>> s3a_conf("/tmp/warehouse")
    {}
    >>> conf = s3a_conf("s3://b/w", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    >>> conf["spark.hadoop.fs.s3a.path.style.access"], conf["spark.hadoop.fs.s3a.endpoint"]
    ('true', 'http://127.0.0.1:9000')
    """
    env = os.environ if env is None else env
    if not warehouse.startswith(("s3://", "s3a://")):
        return {}
    s3a = "spark.hadoop.fs.s3a."
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
    }
    endpoint = (
        env.get("STATECORE_S3_ENDPOINT")
        or env.get("AWS_ENDPOINT_URL_S3")
        or env.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        conf[s3a + "endpoint"] = endpoint
        conf[s3a + "connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    path_style = env.get("STATECORE_S3_PATH_STYLE", "true" if endpoint else "false").lower()
    if path_style not in ("true", "false"):
        raise ConfigError(f"STATECORE_S3_PATH_STYLE is {path_style!r}: give true or false")
    conf[s3a + "path.style.access"] = path_style
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        conf[s3a + "endpoint.region"] = region
    return conf


def local_java_options(
    config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The options statecore gives a local driver's JVM (``spark.driver.defaultJavaOptions``):
    the serial collector. A local run has one or two cores for the collector, and G1 (the JVM's
    default on a machine it deems a server) keeps remembered sets, marking bitmaps and
    concurrent threads beside the heap, memory a local run's heap does not repay. Nothing where
    the caller's settings (``spark.driver.extraJavaOptions``), the JVM's environment
    (``SPARK_SUBMIT_OPTS``, ``JAVA_TOOL_OPTIONS``, ``JDK_JAVA_OPTIONS``) or Spark's
    ``spark-defaults.conf`` choose a collector, as a JVM refuses two; nothing either where
    ``spark-defaults.conf`` sets ``spark.driver.defaultJavaOptions`` (an administrator's
    defaults, which statecore's would replace).

    >>> local_java_options(env={})
    '-XX:+UseSerialGC'
    >>> local_java_options({EXTRA_JAVA_OPTIONS: "-XX:+UseG1GC"}, env={})
    ''
    """
    env = os.environ if env is None else env
    defaults = spark_defaults(env)
    if DEFAULT_JAVA_OPTIONS in defaults:
        return ""
    chosen = " ".join(
        [(config or {}).get(EXTRA_JAVA_OPTIONS, ""), defaults.get(EXTRA_JAVA_OPTIONS, "")]
        + [env.get(name, "") for name in _JAVA_OPTION_VARIABLES]
    )
    names_a_gc = any(
        option.startswith("-XX:+Use") and option.endswith("GC") for option in chosen.split()
    )
    return "" if names_a_gc else LOCAL_GC


def spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` a JVM that PySpark launches reads
    (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``, else PySpark's own ``conf`` folder): each
    line a key and its value, split at the first whitespace, ``=`` or ``:``; none without the
    file."""
    folder = env.get("SPARK_CONF_DIR")
    if not folder:
        import pyspark

        folder = str(Path(env.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "conf")
    try:
        text = (Path(folder) / "spark-defaults.conf").read_text(encoding="utf-8")
    except OSError:
        return {}
    settings: dict[str, str] = {}
    for line in text.splitlines():
        found = _SETTING.match(line.strip())
        if found and not found[1].startswith("#"):
            settings[found[1]] = found[2].strip()
    return settings


def session_conf(
    *,
    master: str | None,
    config: Mapping[str, str] | None = None,
    warehouse: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The settings :func:`build_session` gives Spark (the caller's ``config`` wins)."""
    env = os.environ if env is None else env
    conf: dict[str, str] = {"spark.sql.session.timeZone": "UTC"}
    jars = delta_jars(jars_folder(env))
    if jars or _spark_ships_delta():
        conf["spark.sql.extensions"] = DELTA_EXTENSION
        conf["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    if jars:
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    if master is not None and is_local_master(master):
        conf["spark.driver.host"] = LOOPBACK
        conf["spark.driver.bindAddress"] = LOOPBACK
        options = local_java_options(config, env)
        if options:
            conf[DEFAULT_JAVA_OPTIONS] = options
    if warehouse is None:
        warehouse = StatecoreConfig.resolve(env=dict(env)).warehouse
    conf.update(s3a_conf(warehouse, env))
    for key, value in (config or {}).items():
        if key == "spark.jars" and conf.get(key):
            value = f"{value},{conf[key]}"
        conf[key] = value
    return conf


def worker_python(
    *,
    master: str,
    config: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    executable: str | None = None,
) -> str | None:
    """The interpreter a new session's Python workers start: ``spark.pyspark.python`` in the
    caller's ``config``, else ``PYSPARK_PYTHON`` (which spark-submit sets for the driver it
    starts from its ``spark.pyspark.python``), else, where the workers run on this machine
    (:func:`is_local_master`), ``executable`` (default: the interpreter running this driver,
    which has statecore and the job's packages; under spark-submit, the one
    ``PYSPARK_DRIVER_PYTHON`` named). ``None`` for another cluster: the executors' hosts start
    Spark's default (``python3`` from their ``PATH``), as the driver's path may not exist there;
    name theirs with ``spark.pyspark.python`` (docs/cluster.md).

    >>> venv, env = "/v/bin/python", {"PYSPARK_PYTHON": "/opt/py"}
    >>> worker_python(master="local[2]", env={}, executable=venv)
    '/v/bin/python'
    >>> worker_python(master="local[2]", env=env, executable=venv)
    '/opt/py'
    >>> worker_python(master="local[2]", config={PYTHON_CONF: "/c/py"}, env=env)
    '/c/py'
    >>> worker_python(master="spark://10.0.0.5:7077", env={}, executable=venv) is None
    True
    """
    env = os.environ if env is None else env
    explicit = (config or {}).get(PYTHON_CONF) or env.get("PYSPARK_PYTHON")
    if explicit:
        return explicit
    if is_local_master(master):
        return (sys.executable if executable is None else executable) or None
    return None


def _jvm_loads(class_name: str) -> bool:
    """Whether the running driver JVM (spark-submit's) can load ``class_name``."""
    from pyspark import SparkContext

    try:
        jvm = SparkContext._jvm
        assert jvm is not None
        jvm.java.lang.Class.forName(
            class_name, False, jvm.Thread.currentThread().getContextClassLoader()
        )
    except Exception:
        return False
    return True


def _submitted_master() -> str | None:
    """The master spark-submit gave this driver, when spark-submit started it; else ``None``."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM, launches nothing
    return SparkConf().get("spark.master", None)


def build_session(
    *,
    master: str | None = None,
    app_name: str = "statecore",
    config: Mapping[str, str] | None = None,
    warehouse: str | None = None,
    log_level: str | None = None,
) -> Any:
    """Get or create statecore's Spark session (see the module docstring for what it adds).

    ``master``: ``None`` leaves it to spark-submit (``local[*]`` under plain Python).
    ``warehouse``: where the snapshot tables are (default: the configured warehouse), for the
    S3A settings. ``log_level``: the SparkContext's, e.g. ``"ERROR"``.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    submitted = _submitted_master()
    effective = master or (config or {}).get("spark.master") or submitted or "local[*]"
    if SparkContext._active_spark_context is None:
        # PySpark's SparkContext (and the JVM, for the Python it starts itself) reads only the
        # environment, whatever a session's settings say
        python = worker_python(master=effective, config=config)
        if python is not None:
            os.environ["PYSPARK_PYTHON"] = python
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    conf = session_conf(master=effective, config=config, warehouse=warehouse)
    if submitted is not None and not _jvm_loads(DELTA_CATALOG):
        # spark-submit started the driver's JVM without Delta's JARs (spark.jars can no longer
        # reach its classpath): a catalog class it cannot load would fail every query
        for key, value in (
            ("spark.sql.extensions", DELTA_EXTENSION),
            ("spark.sql.catalog.spark_catalog", DELTA_CATALOG),
        ):
            if conf.get(key) == value:
                del conf[key]
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if log_level is not None:
        session.sparkContext.setLogLevel(log_level)
    return session


def local_query_conf() -> dict[str, str]:
    """Settings for a short query on a local master (``statecore sql --engine spark`` outside
    spark-submit): as many partitions as cores, where Spark's defaults (200 shuffle partitions,
    50 for each Delta snapshot a ``VERSION AS OF`` read rebuilds) would run stages of mostly
    empty tasks. Under spark-submit, nothing: the submitter's settings stand."""
    if _submitted_master() is not None:
        return {}
    cores = str(os.cpu_count() or 1)
    return {
        "spark.sql.shuffle.partitions": cores,
        "spark.databricks.delta.snapshotPartitions": cores,
    }


def has_delta(spark: Any) -> bool:
    """Whether ``spark`` can read Delta tables (Delta's classes are on its classpath)."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.Thread.currentThread().getContextClassLoader()
        loader.loadClass("org.apache.spark.sql.delta.sources.DeltaDataSource")
    except Exception:
        return False
    return bool(spark.conf.get("spark.sql.catalog.spark_catalog", "") == DELTA_CATALOG)


def require_delta(spark: Any) -> None:
    """:class:`ConfigError` unless ``spark`` has Delta Lake (classes, extension and catalog)."""
    if not has_delta(spark):
        raise ConfigError(
            "Spark SQL over state needs Delta Lake's JARs in the Spark session, with "
            f"spark.sql.extensions={DELTA_EXTENSION} and "
            f"spark.sql.catalog.spark_catalog={DELTA_CATALOG} (statecore.spark.build_session "
            f"adds them when it finds the JARs): {_HOW_TO_GET_JARS}"
        )
