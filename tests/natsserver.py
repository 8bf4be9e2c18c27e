"""The NATS server the wake tests need: TAPGATE_TEST_NATS_URL (default nats://127.0.0.1:4222).

Where none answers, those tests are skipped with how to start one, unless TAPGATE_TEST_NATS_REQUIRED is
set (as .ci/run does), which turns the skip into a failure.
"""

from __future__ import annotations

import os

import pytest

from tapgate.adapters.wake.nats_wake import check_reachable
from tapgate.domain.errors import ConfigurationError
from tests.conftest import blocking

NATS_URL = os.environ.get("TAPGATE_TEST_NATS_URL", "nats://127.0.0.1:4222")
HOW_TO_GET_NATS = (
    f"NATS is not reachable at {NATS_URL}: start it (start-stop-daemon --start --oknodo --background "
    "--exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server "
    "-l /var/log/nats-server.log) or point TAPGATE_TEST_NATS_URL at one"
)


def reachable_nats_url() -> str:
    """The test server's URL; skips (or fails, where required) the test when none answers."""
    try:
        blocking(check_reachable(NATS_URL))
    except ConfigurationError:
        if os.environ.get("TAPGATE_TEST_NATS_REQUIRED"):
            pytest.fail(HOW_TO_GET_NATS)
        pytest.skip(HOW_TO_GET_NATS)
    return NATS_URL
