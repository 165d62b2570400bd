"""The UI tests' user: Debian's ``chromium``, headless, driven by Playwright for Python.

Playwright's own browser download cannot work here, so :func:`chromium` launches the browser of
Debian's package (``make chromium`` installs it) by its path. The tests then act as a user
does: sign in on Airflow's login page (:func:`log_in`), click links, pick from lists, fill in
and submit forms, and wait with ``expect`` for what the page shows.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, StorageState, expect, sync_playwright

__all__ = ["FLAGS", "TIMEOUT_MS", "chromium", "log_in", "new_page", "signed_in"]

FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
TIMEOUT_MS = 30_000
"""How long an action or an ``expect`` waits (Playwright's 5 s is short on 2 busy cores)."""


@contextmanager
def chromium() -> Iterator[Browser]:
    """One headless Chromium (Debian's), closed with its Playwright driver at the end."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("chromium is not installed: `make chromium` installs Debian's package")
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def new_page(browser: Browser, **options: Any) -> Iterator[Page]:
    """A page in a browser context of its own (``options``: Playwright's, e.g. a signed-in
    ``storage_state``), closed afterwards."""
    context = browser.new_context(**options)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def signed_in(browser: Browser, url: str, user: str, password: str) -> StorageState:
    """The browser's state (Airflow's ``_token`` cookie) once ``user`` has signed in on the
    login page that ``url`` sends a browser without one to, and is back at ``url``."""
    with new_page(browser) as page:
        page.goto(url)
        log_in(page, user, password)
        expect(page).to_have_url(url)
        return page.context.storage_state()


def log_in(page: Page, user: str, password: str) -> None:
    """Sign in as ``user`` on Airflow's login page, where ``page`` has been sent; Airflow then
    sends the browser back to where it was going."""
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
