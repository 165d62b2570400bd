"""statecore as an Airflow provider, and DAG files that parse fast, on a real Airflow.

The provider is found through the installed distribution's entry point ``apache_airflow_provider``
(``make setup`` installs the project editable, which registers it): Airflow's ProvidersManager
lists it, and the connection form of the UI (the API's hook metadata) offers the ``statecore``
connection type with its fields. The DAG files are parsed as the dag-processor parses them: the
Airflow modules a file imports are imported first, then each file in a process forked for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from tests.airflow.dagrun import REPO
from tests.ops.statebuilder import Table, value_rows, write_checkpoint

pytestmark = pytest.mark.airflow

PROVIDER = """
import json
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
from airflow.providers_manager import ProvidersManager

pm = ProvidersManager()
info = pm.providers["statecore"]
hook = pm.hooks["statecore"]
[meta] = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "statecore"]

from statecore_airflow import StatecoreHook

statecore = StatecoreHook()
with statecore.catalog() as catalog:
    jobs = [job.name for job in catalog.list_jobs()]
print("RESULT " + json.dumps({
    "package": info.data["package-name"],
    "version": info.version,
    "hook": [hook.hook_class_name, hook.connection_id_attribute_name, hook.hook_name],
    "meta": meta.model_dump(mode="json"),
    "warehouse": statecore.get_config().warehouse,
    "jobs": jobs,
}))
"""

PARSE = """
import importlib, json, multiprocessing, sys, time
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag
from airflow.utils.file import iter_airflow_imports

files = sorted(str(p) for p in Path(sys.argv[1]).glob("*.py"))
for path in files:  # what the dag-processor imports before it forks the file's parser
    for module in iter_airflow_imports(path):
        importlib.import_module(module)


def parse(path):
    cpu = time.process_time()
    bag = DagBag(dag_folder=path)
    cpu = time.process_time() - cpu
    [stat] = bag.dagbag_stats
    return {
        "file": Path(path).name,
        "dags": sorted(bag.dags),
        "errors": bag.import_errors,
        "seconds": stat.duration.total_seconds(),
        "cpu_seconds": cpu,
        "statecore_modules": sorted(m for m in sys.modules if m.split(".")[0] == "statecore"),
    }


with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
    print("RESULT " + json.dumps(pool.map(parse, files, chunksize=1)))
"""


def run_airflow(script: str, env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def test_statecore_is_a_provider_with_its_connection_type(tmp_path: Path) -> None:
    # the connection names a catalog and warehouse other than the environment's home
    elsewhere = StatecoreConfig.resolve(home=str(tmp_path / "elsewhere"), env={})
    write_checkpoint(elsewhere, "clicks", 1, {"total": Table(value_rows({"a": 1.0}))})
    env = airflow_environment(REPO, tmp_path / "home")
    env["AIRFLOW_CONN_STATECORE_DEFAULT"] = json.dumps(
        {
            "conn_type": "statecore",
            "extra": {"catalog_url": elsewhere.catalog_url, "warehouse": elsewhere.warehouse},
        }
    )
    result = run_airflow(PROVIDER, env)

    assert result["package"] == "statecore" and result["version"]
    assert result["hook"] == [
        "statecore_airflow.hooks.StatecoreHook",
        "statecore_conn_id",
        "statecore",
    ]
    meta = result["meta"]
    assert meta["hook_name"] == "statecore"
    assert meta["hook_class_name"] == "statecore_airflow.hooks.StatecoreHook"
    fields = meta["extra_fields"]
    assert list(fields) == ["home", "catalog_url", "warehouse"]
    assert fields["catalog_url"]["schema"]["title"] == "Catalog URL"
    assert fields["catalog_url"]["schema"]["format"] == "password"  # it may hold a password
    hidden = {name for name, field in meta["standard_fields"].items() if field and field["hidden"]}
    assert hidden == {"host", "url_schema", "login", "password", "port"}
    # the hook resolves the connection and yields its catalog
    assert result["warehouse"] == elsewhere.warehouse
    assert result["jobs"] == ["clicks"]


def test_each_dag_file_parses_in_well_under_a_second(tmp_path: Path) -> None:
    parsed = run_airflow(PARSE, airflow_environment(REPO, tmp_path / "home"), str(REPO / "dags"))

    dags = {
        "rescale.py": ["rescale"],
        "savepoint.py": ["savepoint"],
        "state_maintenance.py": ["state_maintenance"],
        "stateful_pipeline.py": ["stateful_pipeline"],
        "streaming_kafka.py": ["streaming_kafka"],
        "streaming_pipeline.py": ["streaming_pipeline"],
        "streaming_query.py": ["streaming_query", "streaming_query_stop"],
    }
    assert [p["file"] for p in parsed] == list(dags)
    for p in parsed:
        assert p["errors"] == {} and p["dags"] == dags[p["file"]], p
        # the library (SQLAlchemy, Arrow, DuckDB, ...) loads when a task runs, not at parse time
        assert p["statecore_modules"] == [], p
    # CPU time: on a shared machine the wall clock also counts the neighbours' work
    slow = [(p["file"], p["cpu_seconds"], p["seconds"]) for p in parsed if p["cpu_seconds"] >= 1]
    assert not slow, f"(file, CPU seconds, wall seconds) of DAG files that parse slowly: {slow}"
