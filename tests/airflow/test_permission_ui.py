"""The statecore page per user: each sees and looks up only the jobs whose DAGs they may read.

A real Airflow whose auth manager has per-DAG permissions (``permission_auth.ShopAuthManager``:
``alice`` is an admin, ``bob`` a viewer who may read the DAG ``shop_a`` only). Two DAGs ran
(``permission_dags/``): ``shop_a`` made a checkpoint of the job ``shop_east``, ``shop_b`` one of
``shop_west``, each publishing its job's Asset; a third job, ``shop_orphan``, no DAG ran. Then
``airflow api-server`` with the project's plugins folder. alice sees the three jobs; bob sees
``shop_east`` only, and every page and API route answers the others as unknown jobs (404),
lookups included. ``shop_east`` serves live lookups from a stand-in task that records the token
it is sent: the live lookup uses the job's token, and no page, API response or cookie holds it.
bob's view is checked in a real headless Chromium too, driven by Playwright: he signs in on
Airflow's login page, reads the lists, looks up through the form, and nothing the browser
receives holds the live token.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, Response, expect

from statecore.catalog import Catalog, LiveEndpoint
from statecore.cli.demo import airflow_environment
from statecore.config import StatecoreConfig
from statecore.ops.savepoint import take_savepoint
from tests.airflow.browser import chromium, new_page, signed_in
from tests.airflow.dagrun import REPO, start_driver_and_api_server
from tests.airflow.test_standalone import Api, free_port, stop
from tests.airflow.test_ui_page import START_TIMEOUT, _get
from tests.inprocess import MAX_P, run_checkpoint
from tests.ops.shopstate import Shop, day_records

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAGS = Path(__file__).resolve().parent / "permission_dags"
AUTH_MANAGER = "tests.airflow.permission_auth.ShopAuthManager"
ORPHAN = "shop_orphan"  # a job no DAG ran

DRIVER = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.db import initdb

initdb()
print("MIGRATED", flush=True)
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
for dag_id, date in (("shop_a", "2026-01-03"), ("shop_b", "2026-01-04")):
    run = bag.get_dag(dag_id).test(run_conf={"date": date})
    print("RUN " + json.dumps([dag_id, run.run_id, str(run.state)]), flush=True)
"""


class StandInTask(BaseHTTPRequestHandler):
    """A running task's live endpoint that records the token it is sent and is busy."""

    tokens: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.tokens.append(self.headers.get("Authorization", ""))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": "the task is busy"}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass(frozen=True)
class Airflow:
    base: str
    tokens: dict[str, str]  # user -> Airflow's JWT
    passwords: dict[str, str]  # user -> password, for Airflow's login page
    runs: dict[str, str]  # DAG -> run id
    live_token: str  # shop_east's token for its tasks' live endpoints


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """Two DAG runs, then the API server with the per-DAG auth manager and two users."""
    tmp = tmp_path_factory.mktemp("permission")
    home = tmp / "home"
    port = free_port()
    env = airflow_environment(REPO, home)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")]),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "alice:admin,bob:viewer",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API__WORKERS": "1",
        }
    )
    config = StatecoreConfig.resolve(home=str(home), env={})
    started = start_driver_and_api_server(
        env, tmp, port, DRIVER, DAGS,
        lambda: run_checkpoint(config, Shop(), day_records(2), job=ORPHAN, checkpoint_id=20260102),
    )  # fmt: skip
    driver, lines, server, log = started.driver, started.lines, started.server, started.log
    task = ThreadingHTTPServer(("127.0.0.1", 0), StandInTask)
    threading.Thread(target=task.serve_forever, daemon=True).start()
    try:
        out, _ = driver.communicate(timeout=START_TIMEOUT)
        runs = [json.loads(x[4:]) for x in [*lines, *out.splitlines()] if x.startswith("RUN ")]
        assert [state for *_, state in runs] == ["success", "success"], (
            tmp / "dag-test.log"
        ).read_text()[-4000:]
        with Catalog.connect(config.catalog_url) as catalog:
            token = catalog.live_token("shop_east", create=True)
            assert token is not None
            catalog.live_token("shop_west", create=True)
            address = f"127.0.0.1:{task.server_address[1]}"
            catalog.set_live_endpoints(
                "shop_east",
                "main",
                [
                    LiveEndpoint(
                        job="shop_east",
                        operator="main",
                        subtask=0,
                        key_group_start=0,
                        key_group_end=MAX_P - 1,
                        address=address,
                        checkpoint_id=20260103,
                    )
                ],
            )
            take_savepoint(config, catalog, "shop_east", name="east-before-deploy")
            take_savepoint(config, catalog, "shop_west", name="west-before-deploy")
        api = Api(port)
        api.wait(
            "the API server",
            lambda: api.call("GET", "/api/v2/monitor/health"),
            START_TIMEOUT,
            server,
        )
        passwords = json.loads(
            (Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated").read_text()
        )
        tokens = {
            user: api.call("POST", "/auth/token", {"username": user, "password": passwords[user]})[
                "access_token"
            ]
            for user in ("alice", "bob")
        }
        yield Airflow(api.base, tokens, passwords, {dag: run for dag, run, _ in runs}, token)
    finally:
        task.shutdown()
        driver.kill()
        driver.wait(timeout=30)
        stop(server, tmp / "api-server.log")
        log.close()


@pytest.fixture(scope="module")
def browser(airflow: Airflow) -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def bob(airflow: Airflow, browser: Browser) -> Iterator[Page]:
    """A page of a browser context of its own, bob signed in on Airflow's login page."""
    url = f"{airflow.base}/statecore/"
    state = signed_in(browser, url, "bob", airflow.passwords["bob"])
    with new_page(browser, storage_state=state) as page:
        yield page


def _as(airflow: Airflow, user: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET ``/statecore/<path>`` as ``user``."""
    headers = {"Authorization": f"Bearer {airflow.tokens[user]}", "Accept": "text/html"}
    return _get(f"{airflow.base}/statecore/{path}", headers)


def _json(airflow: Airflow, user: str, path: str) -> Any:
    status, _, body = _as(airflow, user, path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def _west_paths(airflow: Airflow) -> list[str]:
    """Every page and API route that reads the job ``shop_west`` (of the DAG ``shop_b``)."""
    lookup = "job=shop_west&state=total&key=u1"
    return [
        "jobs/shop_west",
        "jobs/shop_west/checkpoints/20260104",
        f"lookup?{lookup}",
        f"lookup?{lookup}&live=on",
        f"lookup?{lookup}&point=west-before-deploy",
        "api/jobs/shop_west/checkpoints",
        "api/jobs/shop_west/checkpoints/20260104",
        f"api/lookup?{lookup}",
        f"api/lookup?{lookup}&live=on",
        "api/savepoints?job=shop_west",
        "api/runs?job=shop_west",
        f"runs/shop_b/{quote(airflow.runs['shop_b'], safe='')}",
    ]


def test_permission_each_user_sees_the_jobs_of_the_dags_they_may_read(airflow: Airflow) -> None:
    jobs = {user: [j["job"] for j in _json(airflow, user, "api/jobs")] for user in airflow.tokens}
    assert jobs == {"alice": ["shop_east", ORPHAN, "shop_west"], "bob": ["shop_east"]}
    savepoints = {
        user: [s["savepoint"] for s in _json(airflow, user, "api/savepoints")]
        for user in airflow.tokens
    }
    assert sorted(savepoints["alice"]) == ["east-before-deploy", "west-before-deploy"]
    assert savepoints["bob"] == ["east-before-deploy"]
    runs = {user: _json(airflow, user, "api/runs")["runs"] for user in airflow.tokens}
    assert sorted(r["dag_id"] for r in runs["alice"]) == ["shop_a", "shop_b"]
    assert [(r["dag_id"], r["job"], r["checkpoint"]) for r in runs["bob"]] == [
        ("shop_a", "shop_east", 20260103)
    ]
    lookup = _json(airflow, "bob", "api/lookup?job=shop_east&state=total&key=u1")
    assert lookup["value"] == 2 and lookup["point"].startswith("checkpoint 20260103"), lookup
    status, _, page = _as(airflow, "bob", "")
    assert status == 200 and b"shop_east" in page
    assert b"shop_west" not in page and ORPHAN.encode() not in page and b"shop_b" not in page


def test_permission_refuses_bob_every_route_of_a_job_he_may_not_read(airflow: Airflow) -> None:
    for path in _west_paths(airflow):
        status, _, body = _as(airflow, "alice", path)
        assert status == 200, (path, status, body[-500:])
        status, _, body = _as(airflow, "bob", path)
        assert status == 404, (path, status, body[-500:])
        assert b"20260104" not in body, path  # no checkpoint of it, nor a lookup's "at"
        if "lookup" not in path:  # the lookup page shows the form as the user filled it in
            assert b"west-before-deploy" not in body, path
    for path in ("jobs/shop_orphan", "api/jobs/shop_orphan/checkpoints"):
        assert _as(airflow, "alice", path)[0] == 200
        assert _as(airflow, "bob", path)[0] == 404
    # a job bob may not read is answered as one that does not exist, without the known jobs
    unknown = _as(airflow, "bob", "api/jobs/nope/checkpoints")
    hidden = _as(airflow, "bob", "api/jobs/shop_west/checkpoints")
    assert unknown[0] == hidden[0] == 404
    assert unknown[2].replace(b"nope", b"JOB") == hidden[2].replace(b"shop_west", b"JOB")
    assert b"shop_west" not in unknown[2] and ORPHAN.encode() not in unknown[2]


def test_permission_live_lookup_token_never_reaches_the_user(airflow: Airflow) -> None:
    StandInTask.tokens.clear()
    lookup = _json(airflow, "bob", "api/lookup?job=shop_east&state=total&key=u1&live=on")
    assert StandInTask.tokens == [f"Bearer {airflow.live_token}"]  # the lookup sent it ...
    assert "the task is busy" in lookup["fallback"] and lookup["value"] == 2, lookup
    run = quote(airflow.runs["shop_a"], safe="")
    east = "job=shop_east&state=total&key=u1"
    paths = [
        "",
        "jobs/shop_east",
        "jobs/shop_east/checkpoints/20260103",
        f"lookup?{east}&live=on",
        f"api/lookup?{east}&live=on",
        "api/jobs",
        "api/jobs/shop_east/checkpoints",
        "api/jobs/shop_east/checkpoints/20260103",
        "api/savepoints",
        "api/runs",
        f"runs/shop_a/{run}",
        *_west_paths(airflow),
    ]
    for user in airflow.tokens:
        for path in paths:
            _, headers, body = _as(airflow, user, path)  # ... and no answer holds it
            assert airflow.live_token.encode() not in body, (user, path)
            assert airflow.live_token not in json.dumps(headers), (user, path)


def test_permission_bob_in_the_browser(airflow: Airflow, bob: Page) -> None:
    received: list[tuple[str, str, bytes]] = []  # all the browser is sent from now on

    def keep(response: Response) -> None:  # read at once: a later page frees the body
        body = b"" if 300 <= response.status < 400 else response.body()  # a redirect has none
        received.append((response.url, json.dumps(response.all_headers()), body))

    bob.on("response", keep)
    bob.goto(f"{airflow.base}/statecore/")
    jobs = bob.locator("#jobs-table tbody tr td:first-child").all_inner_texts()
    assert jobs == ["shop_east"]
    shown = bob.locator("body").inner_text()
    assert "shop_west" not in shown and ORPHAN not in shown
    runs = bob.locator("#runs-table").inner_text()
    assert "shop_a" in runs and "shop_b" not in runs
    # the lookup form's lists offer his job only (and its states); through the page's script,
    # his job live
    job, state = bob.get_by_label("job", exact=True), bob.get_by_label("state", exact=True)
    assert job.locator("option").all_inner_texts() == ["shop_east"]
    assert state.locator("option").all_inner_texts() == ["counts", "items", "last", "total"]
    job.select_option("shop_east")
    state.select_option("total")
    bob.get_by_label("key", exact=True).fill("u1")
    bob.get_by_label("live (the running stream's task)").check()
    with bob.expect_response(lambda r: "/statecore/api/lookup?" in r.url):
        bob.get_by_role("button", name="Look up").click()
    result = bob.locator("#lookup-result")
    expect(result).to_have_attribute("data-status", "ok")
    text = result.inner_text()
    assert "value: 2" in text and "live lookup fell back:" in text, text
    # the other job, which no list offers him, asked for by the form's address: refused
    response = bob.goto(f"{airflow.base}/statecore/lookup?job=shop_west&state=total&key=u1&live=on")
    assert response is not None and response.status == 404
    text = bob.locator("#lookup-result").inner_text()
    assert text.startswith("error:") and "may not read it" in text, text
    assert "value:" not in text
    assert job.locator("option").all_inner_texts() == ["shop_east"]
    # the other job's pages
    response = bob.goto(f"{airflow.base}/statecore/jobs/shop_west")
    assert response is not None and response.status == 404
    expect(bob.locator("h1")).to_have_text("Error 404")
    expect(bob.locator("#checkpoints-table")).to_have_count(0)
    response = bob.goto(f"{airflow.base}/statecore/jobs/shop_west/checkpoints/20260104")
    assert response is not None and response.status == 404
    expect(bob.locator("h1")).to_have_text("Error 404")
    expect(bob.locator("svg.kg-chart")).to_have_count(0)
    # his own job's page, and no live token in any page, answer or cookie the browser holds
    bob.locator("nav").get_by_role("link", name="statecore").click()
    bob.locator("#jobs-table").get_by_role("link", name="shop_east", exact=True).click()
    expect(bob.locator("#checkpoints-table")).to_contain_text("20260103")
    assert airflow.live_token not in bob.content()
    cookies = bob.context.cookies()
    assert cookies and all(airflow.live_token not in c["value"] for c in cookies)
    assert len(received) >= 6  # the pages and the script's lookup
    for url, headers, body in received:
        assert airflow.live_token not in headers and airflow.live_token.encode() not in body, url
