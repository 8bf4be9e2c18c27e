"""The NATS server the wake tests need: TAPGATE_TEST_NATS_URL (default nats://127.0.0.1:4222).

Where none answers, those tests are skipped with how to start one, unless TAPGATE_TEST_NATS_REQUIRED is
set (as .ci/run does), which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tapgate.adapters.wake.nats_wake import check_reachable
from tapgate.domain.errors import ConfigurationError
from tests.conftest import blocking
from tests.live import READY_SECONDS, free_port

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


NATS_SERVER = os.environ.get("TAPGATE_TEST_NATS_SERVER", "/usr/sbin/nats-server")


class PrivateNats:
    """A nats-server of this test's own on a free loopback port, to stop and start again (the shared
    one is never touched)."""

    def __init__(self, folder: Path, *options: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.options = options  # more of nats-server's options: --auth TOKEN, --tls ...
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> PrivateNats:
        if not Path(NATS_SERVER).is_file():
            how = f"nats-server is not at {NATS_SERVER}: install it or point TAPGATE_TEST_NATS_SERVER at it"
            if os.environ.get("TAPGATE_TEST_NATS_REQUIRED"):
                pytest.fail(how)
            pytest.skip(how)
        log = self.folder / f"nats-{self.port}.log"
        self.process = subprocess.Popen(
            [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), "-l", str(log), *self.options]
        )
        deadline = time.monotonic() + READY_SECONDS
        while True:  # ready when it accepts a connection
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            assert self.process.poll() is None, "nats-server exited at start"
            assert time.monotonic() < deadline, "nats-server did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None
