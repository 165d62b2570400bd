"""The statecore page in Airflow's UI, seen in a real headless Chromium.

A real Airflow: the metadata database migrated and a DAG run made with ``dag.test()``
(``ui_page_dags/ui_page_pipeline.py``: it checkpoints a day of the ``shop`` job in-process and
publishes ``statecore://shop``), then ``airflow api-server`` with the project's plugins folder.
The catalog holds a checkpoint made before, a savepoint and the run's checkpoint, with restore
timings and latency percentiles. Chromium logs in with Airflow's token cookie (``_token``, as
the UI's login sets it) and the test asserts what a user sees: the job list, the checkpoint
table, the key-group charts, a lookup result (with and without the page's script), the
savepoints, the link from the DAG run to its checkpoint, and the page inside Airflow's own UI
(the *statecore* entry of the navigation and the run's *statecore checkpoint* tab). Without a
login the API answers 401 and the page sends the browser to Airflow's login.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from statecore.keygroups import assign_to_key_group
from tests.airflow.chromium import Chromium
from tests.airflow.dagrun import REPO, start_driver_and_api_server
from tests.airflow.test_standalone import Api, free_port, stop
from tests.inprocess import MAX_P
from tests.ops.shopstate import USERS, build_shop

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAGS = Path(__file__).resolve().parent / "ui_page_dags"
START_TIMEOUT = 180

DRIVER = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.db import initdb

initdb()
print("MIGRATED", flush=True)
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
run = bag.get_dag("ui_page_pipeline").test(run_conf={"date": "2026-01-03"})
print("RUN " + json.dumps({"run_id": run.run_id, "state": str(run.state)}), flush=True)
"""


@dataclass(frozen=True)
class Airflow:
    base: str
    token: str
    run_id: str


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """The DAG run, then the API server (started as soon as the database is migrated, while
    the run goes on), over the ``shop`` catalog."""
    tmp = tmp_path_factory.mktemp("ui_page")
    home = tmp / "home"
    port = free_port()
    env = airflow_environment(REPO, home)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")]),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API__WORKERS": "1",
        }
    )
    started = start_driver_and_api_server(
        env, tmp, port, DRIVER, DAGS,
        lambda: build_shop(StatecoreConfig.resolve(home=str(home), env={})),
    )  # fmt: skip
    driver, lines, server, log = started.driver, started.lines, started.server, started.log
    try:
        out, _ = driver.communicate(timeout=START_TIMEOUT)
        [run] = [json.loads(x[4:]) for x in [*lines, *out.splitlines()] if x.startswith("RUN ")]
        assert run["state"] == "success", (tmp / "dag-test.log").read_text()[-4000:]
        api = Api(port)
        api.wait(
            "the API server",
            lambda: api.call("GET", "/api/v2/monitor/health"),
            START_TIMEOUT,
            server,
        )
        passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        password = json.loads(passwords.read_text())["admin"]
        token = api.call("POST", "/auth/token", {"username": "admin", "password": password})
        yield Airflow(api.base, token["access_token"], run["run_id"])
    finally:
        driver.kill()
        driver.wait(timeout=30)
        stop(server, tmp / "api-server.log")
        log.close()


@pytest.fixture(scope="module")
def browser(airflow: Airflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    with Chromium(tmp_path_factory.mktemp("chromium")) as chromium:
        yield chromium


def test_ui_page_refuses_a_request_without_an_airflow_login(
    airflow: Airflow, browser: Chromium
) -> None:
    status, _, body = _get(f"{airflow.base}/statecore/api/jobs")
    assert status == 401 and b"shop" not in body
    status, headers, _ = _get(f"{airflow.base}/statecore/", {"Accept": "text/html"})
    assert status == 303 and "/auth/login" in headers["location"]
    status, _, body = _get(
        f"{airflow.base}/statecore/api/jobs", {"Authorization": "Bearer not-a-token"}
    )
    assert status in (401, 403) and b"shop" not in body
    landed = browser.goto(f"{airflow.base}/statecore/jobs/shop")  # no cookie yet
    assert "/auth/login" in landed or "/login" in landed
    assert "20260103" not in browser.evaluate("document.body.innerText")


def test_ui_page_shows_jobs_checkpoints_charts_and_savepoints(
    airflow: Airflow, browser: Chromium
) -> None:
    browser.set_cookie(airflow.base + "/", "_token", airflow.token)
    browser.goto(f"{airflow.base}/statecore/")
    jobs = browser.text("#jobs-table")
    assert "shop" in jobs and "20260103" in jobs and "128" in jobs
    savepoints = browser.text("#savepoints-table")
    assert "before-deploy" in savepoints and "20260101" in savepoints

    browser.evaluate("document.querySelector('#jobs-table a').click()")
    browser.wait_for("location.pathname.endsWith('/statecore/jobs/shop')")
    browser.wait_for("!!document.querySelector('#checkpoints-table')")
    rows = browser.evaluate(
        "Array.from(document.querySelectorAll('#checkpoints-table tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.innerText))"
    )
    heads = browser.evaluate(
        "Array.from(document.querySelectorAll('#checkpoints-table th')).map(c => c.innerText)"
    )
    table = [dict(zip(heads, row, strict=True)) for row in rows]
    assert [r["id"] for r in table] == ["20260103", "20260101"]
    assert all(r["status"] == "COMPLETED" and r["kind"] == "CHECKPOINT" for r in table)
    assert int(table[0]["rows"].replace(",", "")) > 0 and table[0]["restored subtasks"] == "2"
    assert float(table[0]["worst p99 (µs)"]) > 0  # latency tracking was on

    browser.goto(f"{airflow.base}/statecore/jobs/shop/checkpoints/20260103")
    charts = browser.evaluate(
        "Array.from(document.querySelectorAll('svg.kg-chart'))"
        ".map(s => [s.dataset.state, s.querySelectorAll('rect').length,"
        " Math.max(...Array.from(s.querySelectorAll('rect')).map(r => r.getBBox().height))])"
    )
    by_state = {state: (bars, tallest) for state, bars, tallest in charts}
    assert set(by_state) == {"last", "items", "counts", "total"}
    key_groups = {assign_to_key_group(f"u{i}", MAX_P) for i in range(USERS)}
    assert by_state["total"][0] == len(key_groups) and by_state["total"][1] > 50
    caption = browser.text("figcaption")
    assert "key groups" in caption and "bytes" in caption
    assert (
        len(
            browser.evaluate(
                "Array.from(document.querySelectorAll('#restore-table tbody tr'))"
                ".map(r => r.innerText)"
            )
        )
        == 2
    )
    latency = browser.text("#latency-table")
    assert "counts" in latency and "put" in latency


def test_ui_page_key_lookup(airflow: Airflow, browser: Chromium) -> None:
    browser.set_cookie(airflow.base + "/", "_token", airflow.token)
    browser.goto(f"{airflow.base}/statecore/")
    browser.evaluate(
        "(() => { const set = (n, v) => document.getElementById('lookup-' + n).value = v;"
        " set('job', 'shop'); set('state', 'total'); set('key', 'u1');"
        " document.querySelector('#lookup-form button').click(); })()"
    )
    browser.wait_for("document.getElementById('lookup-result').dataset.status")
    result = browser.text("#lookup-result")
    assert "value: 4" in result, result  # 2 purchases on day 1, 2 on day 3
    assert f"key group: {assign_to_key_group('u1', MAX_P)}" in result
    assert "checkpoint 20260103" in result and "bytes read:" in result
    # without the page's script: the form's own GET
    browser.goto(
        f"{airflow.base}/statecore/lookup?job=shop&state=counts&key=u1&user_key=pen"
        "&point=before-deploy"
    )
    result = browser.text("#lookup-result")
    assert 'value: {"pen": 1}' in result and "before-deploy" in result, result
    browser.goto(f"{airflow.base}/statecore/lookup?job=shop&state=total&key=u1&live=on")
    result = browser.text("#lookup-result")  # no stream serves it live: the latest checkpoint
    assert "value: 4" in result and "live lookup fell back:" in result, result
    browser.goto(f"{airflow.base}/statecore/lookup?job=shop&state=nope&key=u1")
    assert "error:" in browser.text("#lookup-result") and "nope" in browser.text("#lookup-result")


def test_ui_page_links_the_dag_run_to_its_checkpoint_inside_airflow(
    airflow: Airflow, browser: Chromium
) -> None:
    browser.set_cookie(airflow.base + "/", "_token", airflow.token)
    browser.goto(f"{airflow.base}/statecore/")
    runs = browser.text("#runs-table")
    assert "ui_page_pipeline" in runs and airflow.run_id in runs and "20260103" in runs
    # Airflow's UI: the navigation entry shows the page in a frame ...
    browser.goto(f"{airflow.base}/plugin/statecore")
    jobs = browser.wait_for(
        "(() => { const f = document.querySelector('iframe');"
        " const t = f && f.contentDocument && f.contentDocument.querySelector('#jobs-table');"
        " return t && t.innerText; })()"
    )
    assert "shop" in jobs
    # ... and the DAG run's tab names the checkpoint the run completed
    run = quote(airflow.run_id, safe="")
    browser.goto(f"{airflow.base}/dags/ui_page_pipeline/runs/{run}/plugin/statecore-run")
    link = browser.wait_for(
        "(() => { const f = document.querySelector('iframe');"
        " const a = f && f.contentDocument && f.contentDocument.querySelector('a.checkpoint-link');"
        " return a && [a.innerText, a.href]; })()"
    )
    assert link[0] == "checkpoint 20260103"
    assert link[1].endswith("/statecore/jobs/shop/checkpoints/20260103")
    # the task that published the Asset has a button leading there
    headers = {"Authorization": f"Bearer {airflow.token}"}
    status, _, body = _get(
        f"{airflow.base}/api/v2/dags/ui_page_pipeline/dagRuns/{run}/taskInstances/checkpoint/links",
        headers,
    )
    assert status == 200, body
    url = json.loads(body)["extra_links"]["statecore checkpoint"]
    assert url == f"{airflow.base}/statecore/runs/ui_page_pipeline/{run}"
    browser.goto(url)
    assert browser.text("a.checkpoint-link") == "checkpoint 20260103"


def test_ui_page_plugin_is_registered_once(airflow: Airflow) -> None:
    headers = {"Authorization": f"Bearer {airflow.token}"}
    status, _, body = _get(f"{airflow.base}/api/v2/plugins", headers)
    assert status == 200
    [plugin] = [p for p in json.loads(body)["plugins"] if p["name"] == "statecore"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/statecore"]
    views = {v["name"]: v for v in plugin["external_views"]}
    assert views["statecore"]["destination"] == "nav"
    assert views["statecore checkpoint"]["destination"] == "dag_run"
    status, _, body = _get(f"{airflow.base}/api/v2/plugins/importErrors", headers)
    assert status == 200 and json.loads(body)["total_entries"] == 0, body
