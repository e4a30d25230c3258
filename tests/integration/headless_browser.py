"""Debian's chromium, headless, through chromedriver, for the console's browser tests:
whether it is installed, a driver on a profile of its own, and waits on what a page
shows (WebDriverWait on an element or its text, never a sleep)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 30.0


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not missing:
        return None
    return (
        f"{' and '.join(missing)} not found: install them with "
        "`apt-get install chromium chromium-driver` (`make` installs them)"
    )


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[WebDriver]:
    """A headless chromium with its profile in ``profile``; quit on leaving."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,800",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    # An explicit driver path: selenium-manager never looks for (or downloads) one.
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_window_size(1280, 800)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_text(driver: WebDriver, element_id: str, text: str, timeout_s: float = WAIT_S) -> None:
    WebDriverWait(driver, timeout_s).until(
        expected_conditions.text_to_be_present_in_element((By.ID, element_id), text)
    )
