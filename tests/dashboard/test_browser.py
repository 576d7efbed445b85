"""The dashboard in real headless Chromium against a real daphne, Postgres and Redis.

The server gets a database of its own (the suite's test database lives in
transactions it could not see) and Redis db 14; state changes go through the
real services in separate processes (``tests.dashboard.driver``), whose
after-commit broadcasts reach the server's consumer. The page must follow
them without a reload.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.dashboard import driver
from tests.e2e.cluster import PG_ADMIN, ROOT, free_port, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOT = Path("/tmp/dashboard.png")
#: How long the page may take to show a change; the wait ends as soon as it does.
UPDATE_WAIT_MS = 15_000

playwright_sync = pytest.importorskip("playwright.sync_api")
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}"
)


@dataclass
class DashboardServer:
    base_url: str
    env: dict[str, str]
    log: Path

    def drive(self, step: str, *args: str) -> dict:
        """Run one ``tests.dashboard.driver`` step against the server's database."""
        out = subprocess.run(
            [sys.executable, "-m", "tests.dashboard.driver", step, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, f"driver step {step} failed:\n{out.stderr}"
        return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def dashboard_server(tmp_path) -> Iterator[DashboardServer]:
    name = f"tangram_dashboard_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tangram_web.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{name}",
        "REDIS_URL": "redis://127.0.0.1:6379/14",
        # No agents here: nothing may expire the node's lease or schedule behind the test's back.
        "TANGRAM_SCHEDULER": "inprocess",
        "TANGRAM_LEASE_S": "3600",
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "daphne.log"
    server = DashboardServer(f"http://127.0.0.1:{port}", env, log)
    daphne = None
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        with log.open("ab") as out:
            daphne = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "daphne"),
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "tangram_web.asgi:application",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def up() -> bool:
            try:
                return httpx.get(f"{server.base_url}/admin/login/", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "daphne")
        yield server
    except BaseException:
        print(log.read_text(errors="replace")[-6000:] if log.exists() else "no daphne log")
        raise
    finally:
        if daphne is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daphne.pid, signal.SIGTERM)
            try:
                daphne.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(daphne.pid, signal.SIGKILL)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def page(dashboard_server):
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.set_default_timeout(UPDATE_WAIT_MS)
            yield page
        finally:
            browser.close()


@needs_chromium
def test_the_dashboard_follows_actions_from_queue_to_node_to_done(dashboard_server, page):
    expect = playwright_sync.expect
    gpu_action = dashboard_server.drive("seed")["submitted"][0]

    page.goto(f"{dashboard_server.base_url}/admin/login/?next=/")
    page.fill("#id_username", driver.STAFF_USERNAME)
    page.fill("#id_password", driver.STAFF_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{dashboard_server.base_url}/")
    # Gone if the page reloads: every later update must arrive over the websocket.
    page.evaluate("window.loadedOnce = true")
    tid = page.get_by_test_id
    node, tenant = f"node-{driver.NODE}", f"tenant-{driver.TENANT}"

    expect(tid("connection-status")).to_have_text("live", timeout=UPDATE_WAIT_MS)
    expect(tid(node)).to_be_visible()
    expect(tid(f"{node}-capacity-cpu")).to_have_text("4")
    expect(tid(f"{node}-used-cpu")).to_have_text("0")
    expect(tid(f"{tenant}-queued")).to_have_text(str(driver.SUBMITTED))
    expect(tid(f"{node}-running-count")).to_have_text("0")

    placed = dashboard_server.drive("schedule")["placed"]
    assert placed == 4  # four one-core actions fill the four cores; one waits

    expect(tid(f"{tenant}-queued")).to_have_text("1", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{tenant}-assigned")).to_have_text("4", timeout=UPDATE_WAIT_MS)
    # The one left queued says why: the tenant holds its whole cpu limit.
    expect(tid(f"{tenant}-waiting")).to_have_text(
        "its tenant is at its cpu limit: it holds 4 of 4, and this asks 1 more",
        timeout=UPDATE_WAIT_MS,
    )
    expect(tid(f"{node}-running-count")).to_have_text("4", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{node}-used-cpu")).to_have_text("4", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{node}-free-cpu")).to_have_text("0", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{node}-used-memory")).to_have_text("1 GiB", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{node}-used-gpu")).to_have_text("1", timeout=UPDATE_WAIT_MS)
    expect(tid(f"action-{gpu_action}-alloc")).to_contain_text("GPU 0")

    started = dashboard_server.drive("start", "2")["started"]
    running = tid(f"{node}-running").locator("li[data-state=running]")
    expect(running).to_have_count(2, timeout=UPDATE_WAIT_MS)
    for action_id in started:
        expect(tid(f"action-{action_id}")).to_have_attribute("data-state", "running")
        expect(tid(f"action-{action_id}")).to_contain_text(driver.TENANT)
    expect(tid(f"{tenant}-running")).to_have_text("2", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{tenant}-usage-cpu")).to_have_text("4")
    expect(tid(f"{tenant}-lends-cpu")).to_have_text("lends ≤ 1")
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    dashboard_server.drive("finish")

    expect(tid(f"{node}-running").locator("li")).to_have_count(0, timeout=UPDATE_WAIT_MS)
    expect(tid(f"{node}-running-count")).to_have_text("0", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{node}-used-cpu")).to_have_text("0", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{tenant}-running")).to_have_text("0", timeout=UPDATE_WAIT_MS)
    expect(tid(f"{tenant}-queued")).to_have_text("1", timeout=UPDATE_WAIT_MS)

    # The node's agent keeps a scorer loaded: its card says so, live.
    expect(tid(f"{node}-warm")).to_have_count(0)
    scorer_key = "scorer:" + "1a2b3c4d" * 4
    dashboard_server.drive("warm", scorer_key)
    expect(tid(f"{node}-warm")).to_have_text(
        "warm (1 of 2): scorer 1a2b3c4d", timeout=UPDATE_WAIT_MS
    )
    expect(tid(f"{node}-warm")).to_have_attribute("title", scorer_key)

    # More batchable actions than free cores: placed in batches of two, shown as such.
    members = dashboard_server.drive("batch")["submitted"]
    dashboard_server.drive("schedule")
    expect(tid(f"action-{members[0]}-alloc")).to_contain_text("batch of 2", timeout=UPDATE_WAIT_MS)
    expect(tid(f"action-{members[0]}-alloc")).to_contain_text("0.5 cpu")
    expect(tid("connection-status")).to_have_text("live")
    assert page.evaluate("window.loadedOnce") is True
