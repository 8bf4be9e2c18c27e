"""Debian's Chromium driven by Playwright for Python, for the browser phone app's end-to-end tests.

The tests need /usr/bin/chromium (Debian's package ``chromium``) and the ``playwright`` Python package,
which drives a given executable: Playwright's own browser download is never used. Where either is
missing the tests are skipped with the reason, unless TAPGATE_TEST_BROWSER_REQUIRED is set (as .ci/run
does), which turns the skip into a failure.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("TAPGATE_TEST_CHROMIUM", "/usr/bin/chromium"))
# As the machine notes say Debian's Chromium runs here: no sandbox as root, and nothing that would
# reach out to Google's services from a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The phone's own apps, faked: a headless test browser has no dialer, messages or mail app, and once a
# page hands Chromium such a link it shows a dialog nobody sees and drops every later click on the page
# (measured: each click for 20 s after a `tel:` link). Whether it gets there first or the test's route
# that aborts non-loopback requests does is a race a loaded machine loses. So the page's sms:, tel: and
# mailto: links go to this fake instead, which keeps them in `window.platformLinks` for the test to read.
PLATFORM_APPS = """
(() => {
  const ours = /^(sms|tel|mailto):/i;
  window.platformLinks = [];
  const take = (anchor) => {
    if (!ours.test(anchor.href)) return false;
    window.platformLinks.push(anchor.href);
    return true;
  };
  const click = HTMLAnchorElement.prototype.click;
  HTMLAnchorElement.prototype.click = function () {
    if (!this.isConnected && take(this)) return;  // a link made and clicked in one go never reaches the page
    click.call(this);
  };
  document.addEventListener("click", (event) => {
    const anchor = event.target instanceof Element ? event.target.closest("a[href]") : null;
    if (anchor && take(anchor)) event.preventDefault();
  }, true);
})();
"""
HOW_TO_GET_A_BROWSER = (
    "the browser app's tests need Debian's Chromium at {chromium} and Playwright for Python: "
    "apt-get update && apt-get install -y chromium, and pip install playwright "
    "(never 'playwright install': the tests drive Debian's Chromium, not a downloaded one)"
)
ARTIFACTS = Path(__file__).parent / "artifacts"
# Everything but the gateway on loopback: a test never reaches the internet, and a map link opened in a
# tab is answered at once instead of waiting for a lookup that cannot succeed here.
NOT_LOOPBACK = re.compile(r"^(?!https?://127\.0\.0\.1[:/]|wss?://127\.0\.0\.1[:/]|blob:|data:).+")


def require_browser() -> None:
    """Skip (or, with TAPGATE_TEST_BROWSER_REQUIRED set, fail) when Chromium or Playwright is missing."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"no {CHROMIUM}")
    if importlib.util.find_spec("playwright") is None:
        missing.append("no playwright package")
    if not missing:
        return
    reason = f"{', '.join(missing)}: " + HOW_TO_GET_A_BROWSER.format(chromium=CHROMIUM)
    if os.environ.get("TAPGATE_TEST_BROWSER_REQUIRED"):
        pytest.fail(reason)
    pytest.skip(reason)


CERTUTIL = "certutil"  # Debian's libnss3-tools


def require_certutil() -> None:
    """Skip (or, with TAPGATE_TEST_BROWSER_REQUIRED set, fail) when NSS's certutil is missing."""
    if shutil.which(CERTUTIL):
        return
    reason = "trusting a local CA in Chromium needs NSS's certutil: apt-get install -y libnss3-tools"
    if os.environ.get("TAPGATE_TEST_BROWSER_REQUIRED"):
        pytest.fail(reason)
    pytest.skip(reason)


def home_trusting(folder: Path, ca: Path) -> dict[str, str]:
    """The environment of a Chromium whose HOME is ``folder``, with ``ca`` trusted for web sites in its NSS
    database ($HOME/.pki/nssdb), as a person's phone trusts a CA they installed."""
    require_certutil()
    nssdb = folder / ".pki" / "nssdb"
    nssdb.mkdir(parents=True, exist_ok=True)
    database = f"sql:{nssdb}"
    subprocess.run([CERTUTIL, "-d", database, "-N", "--empty-password"], check=True, capture_output=True)
    subprocess.run(
        [CERTUTIL, "-d", database, "-A", "-t", "C,,", "-n", "tapgate-ca", "-i", str(ca)],
        check=True,
        capture_output=True,
    )
    return {**os.environ, "HOME": str(folder)}


def resolving_to_loopback(*names: str) -> str:
    """The Chromium argument that makes ``names`` resolve to 127.0.0.1, as a LAN's DNS or mDNS would."""
    return "--host-resolver-rules=" + ", ".join(f"MAP {name} 127.0.0.1" for name in names)
