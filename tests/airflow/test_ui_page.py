"""The statecore page in Airflow's UI, used in a real headless Chromium driven by Playwright.

A real Airflow: the metadata database migrated and two DAG runs made with ``dag.test()``
(``ui_page_dags/ui_page_pipeline.py``: it checkpoints a day of the ``shop`` job in-process and
publishes ``statecore://shop``; the second run of the same day finds its checkpoint complete, a
no-op), then ``airflow api-server`` with the project's plugins folder. The catalog holds a
checkpoint made before, a savepoint and the run's checkpoint, with restore timings and latency
percentiles. The browser signs in on Airflow's login page and does what a user does: clicks
from the job list to the checkpoint table and the key-group charts, picks the job and the state
of a lookup from the lists the catalog fills and submits the form (with and without the page's
script), reads the savepoints, follows the link from the DAG run to its checkpoint, and opens
the page inside Airflow's own UI (the *statecore* entry of the navigation and the run's
*statecore checkpoint* tab). What it reads: a state has one name on every part of the page,
numbers of 1,000 and more have thousands separators, and the no-op run is marked as one.
Without a login the API answers 401 and the page sends the browser to Airflow's login, which
brings it back.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Locator, Page, StorageState, expect

from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from statecore.keygroups import assign_to_key_group
from tests.airflow.browser import chromium, log_in, new_page, signed_in
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
for _ in range(2):  # the second run finds checkpoint 20260103 complete: a no-op
    run = bag.get_dag("ui_page_pipeline").test(run_conf={"date": "2026-01-03"})
    print("RUN " + json.dumps({"run_id": run.run_id, "state": str(run.state)}), flush=True)
"""
STATES = ["counts", "items", "last", "total"]  # the shop job's keyed states, by name
GROUPED = re.compile(r"\d{1,3}(,\d{3})+")  # a number of 1,000 or more, as the page shows it


@dataclass(frozen=True)
class Airflow:
    base: str
    password: str  # admin's
    token: str  # admin's, for the REST API
    run_id: str  # the run that completed checkpoint 20260103
    no_op_run_id: str  # a later run of the same day


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
        runs = [json.loads(x[4:]) for x in [*lines, *out.splitlines()] if x.startswith("RUN ")]
        assert [r["state"] for r in runs] == ["success", "success"], (
            tmp / "dag-test.log"
        ).read_text()[-4000:]
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
        yield Airflow(
            api.base, password, token["access_token"], runs[0]["run_id"], runs[1]["run_id"]
        )
    finally:
        driver.kill()
        driver.wait(timeout=30)
        stop(server, tmp / "api-server.log")
        log.close()


@pytest.fixture(scope="module")
def browser(airflow: Airflow) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def admin(airflow: Airflow, browser: Browser) -> StorageState:
    """The browser's state once admin has signed in on Airflow's login page."""
    return signed_in(browser, f"{airflow.base}/statecore/", "admin", airflow.password)


@pytest.fixture
def page(browser: Browser, admin: StorageState) -> Iterator[Page]:
    """A page of a browser context of its own, signed in as admin."""
    with new_page(browser, storage_state=admin) as page:
        yield page


def _cells(table: Locator) -> list[dict[str, str]]:
    """The rows of a rendered table as the user reads them: heading -> cell text."""
    heads = table.locator("thead th").all_inner_texts()
    return [
        dict(zip(heads, row.locator("td").all_inner_texts(), strict=True))
        for row in table.locator("tbody tr").all()
    ]


def test_ui_page_refuses_a_request_without_an_airflow_login(
    airflow: Airflow, browser: Browser
) -> None:
    status, _, body = _get(f"{airflow.base}/statecore/api/jobs")
    assert status == 401 and b"shop" not in body
    status, headers, _ = _get(f"{airflow.base}/statecore/", {"Accept": "text/html"})
    assert status == 303 and "/auth/login" in headers["location"]
    status, _, body = _get(
        f"{airflow.base}/statecore/api/jobs", {"Authorization": "Bearer not-a-token"}
    )
    assert status in (401, 403) and b"shop" not in body
    with new_page(browser) as page:  # no cookie
        page.goto(f"{airflow.base}/statecore/jobs/shop")
        expect(page).to_have_url(re.compile(r"/auth/login|/login"))
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        assert "20260103" not in page.inner_text("body")
        # signed in, the browser is back where it was going
        log_in(page, "admin", airflow.password)
        expect(page).to_have_url(f"{airflow.base}/statecore/jobs/shop")
        expect(page.locator("#checkpoints-table")).to_contain_text("20260103")


def test_ui_page_shows_jobs_checkpoints_charts_and_savepoints(airflow: Airflow, page: Page) -> None:
    page.goto(f"{airflow.base}/statecore/")
    jobs = page.locator("#jobs-table").inner_text()
    assert "shop" in jobs and "20260103" in jobs and "128" in jobs
    [savepoint] = _cells(page.locator("#savepoints-table"))
    assert savepoint["savepoint"] == "before-deploy" and savepoint["from checkpoint"] == "20260101"
    assert GROUPED.fullmatch(savepoint["rows"]) and GROUPED.fullmatch(savepoint["bytes"])

    page.locator("#jobs-table").get_by_role("link", name="shop", exact=True).click()
    expect(page).to_have_url(re.compile(r"/statecore/jobs/shop$"))
    table = _cells(page.locator("#checkpoints-table"))
    assert [r["id"] for r in table] == ["20260103", "20260101"]  # ids are not grouped
    assert all(r["status"] == "COMPLETED" and r["kind"] == "CHECKPOINT" for r in table)
    assert int(table[0]["rows"].replace(",", "")) > 0 and table[0]["restored subtasks"] == "2"
    assert float(table[0]["worst p99 (µs)"]) > 0  # latency tracking was on
    for row in table:  # 1,201 and 1,501 rows, some 465,000 bytes: with thousands separators
        assert GROUPED.fullmatch(row["rows"]) and GROUPED.fullmatch(row["bytes"]), row
        assert re.fullmatch(r"\d+(\.\d{1,3})?", row["duration (s)"]), row
    # the job page's lookup form offers the job's states
    expect(page.get_by_label("job", exact=True)).to_have_value("shop")
    assert _offered(page) == STATES

    page.locator("#checkpoints-table").get_by_role("link", name="20260103").click()
    expect(page).to_have_url(re.compile(r"/statecore/jobs/shop/checkpoints/20260103$"))
    charts = page.locator("svg.kg-chart").evaluate_all(
        "charts => charts.map(s => [s.dataset.state, s.querySelectorAll('rect').length,"
        " Math.max(...Array.from(s.querySelectorAll('rect')).map(r => r.getBBox().height))])"
    )
    by_state = {state: (bars, tallest) for state, bars, tallest in charts}
    assert set(by_state) == {"last", "items", "counts", "total"}
    key_groups = {assign_to_key_group(f"u{i}", MAX_P) for i in range(USERS)}
    assert by_state["total"][0] == len(key_groups) and by_state["total"][1] > 50
    caption = page.locator("figcaption").first.inner_text()
    assert "key groups" in caption and "bytes" in caption
    assert re.search(r"[\d,]+ rows, \d{1,3}(,\d{3})+ bytes", caption), caption
    restores = _cells(page.locator("#restore-table"))
    assert len(restores) == 2
    assert all(GROUPED.fullmatch(r["bytes read"]) for r in restores), restores
    latency = page.locator("#latency-table").inner_text()
    assert "counts" in latency and "put" in latency
    # a state has one name everywhere: the charts, their captions, the latency table and the
    # lookup form's list
    captions = page.locator("figcaption .state-name").all_inner_texts()
    latencies = sorted({r["state"] for r in _cells(page.locator("#latency-table"))})
    assert sorted(by_state) == sorted(captions) == latencies == STATES


def _offered(page: Page) -> list[str]:
    """The states the lookup form's list offers for the job picked (those the user sees)."""
    return page.locator("#lookup-state optgroup:not([disabled]) option").all_inner_texts()


def test_ui_page_key_lookup(
    airflow: Airflow, browser: Browser, admin: StorageState, page: Page
) -> None:
    page.goto(f"{airflow.base}/statecore/")
    # job and state are picked from the lists the catalog fills
    job, state = page.get_by_label("job", exact=True), page.get_by_label("state", exact=True)
    assert job.locator("option").all_inner_texts() == ["shop"]
    job.select_option("shop")
    assert _offered(page) == STATES
    state.select_option("total")
    page.get_by_label("key", exact=True).fill("u1")
    page.get_by_role("button", name="Look up").click()
    result = page.locator("#lookup-result")
    expect(result).to_have_attribute("data-status", "ok")
    expect(page).to_have_url(f"{airflow.base}/statecore/")  # the page's script answered
    text = result.inner_text()
    assert "value: 4" in text, text  # 2 purchases on day 1, 2 on day 3
    assert f"key group: {assign_to_key_group('u1', MAX_P)}" in text
    assert "checkpoint 20260103" in text and "bytes read:" in text
    assert re.search(r"bytes read: [\d,]+ of \d{1,3}(,\d{3})+ \(", text), text  # grouped
    # without the page's script: the form's own GET, to the lookup page
    with new_page(browser, storage_state=admin, java_script_enabled=False) as plain:
        plain.goto(f"{airflow.base}/statecore/")
        plain.get_by_label("job", exact=True).select_option("shop")
        plain.get_by_label("state", exact=True).select_option("counts")
        plain.get_by_label("key", exact=True).fill("u1")
        plain.get_by_label("user key (map)").fill("pen")
        plain.get_by_label("checkpoint id or savepoint").fill("before-deploy")
        plain.get_by_role("button", name="Look up").click()
        expect(plain).to_have_url(re.compile(r"/statecore/lookup\?job=shop&state=counts&"))
        text = plain.locator("#lookup-result").inner_text()
        assert 'value: {"pen": 1}' in text and "before-deploy" in text, text
        assert re.search(r"bytes read: [\d,]+ of \d{1,3}(,\d{3})+ \(", text), text
        # the lookup page keeps what was picked; live: no stream serves it, so the latest
        # checkpoint answers
        expect(plain.get_by_label("state", exact=True)).to_have_value("counts")
        plain.get_by_label("state", exact=True).select_option("total")
        plain.get_by_label("user key (map)").fill("")
        plain.get_by_label("checkpoint id or savepoint").fill("")
        plain.get_by_label("live (the running stream's task)").check()
        plain.get_by_role("button", name="Look up").click()
        expect(plain).to_have_url(re.compile(r"&live=on"))
        text = plain.locator("#lookup-result").inner_text()
        assert "value: 4" in text and "live lookup fell back:" in text, text
    # a state the list does not offer, asked for by its address
    page.goto(f"{airflow.base}/statecore/lookup?job=shop&state=nope&key=u1")
    text = page.locator("#lookup-result").inner_text()
    assert "error:" in text and "nope" in text, text


def test_ui_page_links_the_dag_run_to_its_checkpoint_inside_airflow(
    airflow: Airflow, page: Page
) -> None:
    page.goto(f"{airflow.base}/statecore/")
    runs = {r["run"]: r for r in _cells(page.locator("#runs-table"))}
    assert set(runs) == {airflow.run_id, airflow.no_op_run_id}
    assert all(
        r["DAG"] == "ui_page_pipeline" and r["checkpoint"] == "20260103" for r in runs.values()
    )
    # the run that completed the checkpoint, and the later one of the same day, marked a no-op
    assert runs[airflow.run_id]["outcome"] == "completed"
    assert runs[airflow.no_op_run_id]["outcome"] == "no-op"
    expect(page.locator("#no-op-note")).to_contain_text("complete before the run started")
    # Airflow's UI: the navigation entry shows the page in a frame ...
    page.goto(f"{airflow.base}/plugin/statecore")
    expect(page.frame_locator("iframe").locator("#jobs-table")).to_contain_text("shop")
    # ... and the DAG run's tab names the checkpoint the run completed, linked to its page
    run = quote(airflow.run_id, safe="")
    page.goto(f"{airflow.base}/dags/ui_page_pipeline/runs/{run}/plugin/statecore-run")
    tab = page.frame_locator("iframe")
    link = tab.locator("a.checkpoint-link")
    expect(link).to_have_text("checkpoint 20260103")
    expect(tab.locator("#run-checkpoint")).not_to_contain_text("no-op")
    assert link.evaluate("a => a.href").endswith("/statecore/jobs/shop/checkpoints/20260103")
    link.click()
    expect(tab.locator("h1")).to_have_text("Checkpoint 20260103 of shop")
    # the no-op run's tab says it was one
    no_op = quote(airflow.no_op_run_id, safe="")
    page.goto(f"{airflow.base}/dags/ui_page_pipeline/runs/{no_op}/plugin/statecore-run")
    expect(tab.locator("a.checkpoint-link")).to_have_text("checkpoint 20260103")
    expect(tab.locator("#run-checkpoint .no-op")).to_have_text("no-op")
    # the task that published the Asset has a button leading there
    headers = {"Authorization": f"Bearer {airflow.token}"}
    status, _, body = _get(
        f"{airflow.base}/api/v2/dags/ui_page_pipeline/dagRuns/{run}/taskInstances/checkpoint/links",
        headers,
    )
    assert status == 200, body
    url = json.loads(body)["extra_links"]["statecore checkpoint"]
    assert url == f"{airflow.base}/statecore/runs/ui_page_pipeline/{run}"
    page.goto(url)
    expect(page.locator("a.checkpoint-link")).to_have_text("checkpoint 20260103")


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
