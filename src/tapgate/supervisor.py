"""``tapgate serve --workers N``: uvicorn's supervisor, except that a SIGHUP restarts the workers only when
what a new worker reads first (the settings and the policies file) is sound. When it is not, the running
workers keep serving with the rules in force, and one line says why, as a single process does on a
policies file that does not parse."""

from __future__ import annotations

import logging
from collections.abc import Callable
from socket import socket
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from tapgate.bootstrap import load_policies
from tapgate.config import load_settings
from tapgate.domain.errors import ConfigurationError, PolicyFileError

log = logging.getLogger("tapgate.serve")


def check_configuration() -> None:
    """Read the settings and the policies file as a starting worker does. Raises ConfigurationError
    (PolicyFileError for the policies file)."""
    load_policies(load_settings())


class Supervisor(Multiprocess):
    def __init__(
        self, config: uvicorn.Config, sockets: list[socket], check: Callable[[], None] = check_configuration
    ) -> None:
        super().__init__(config, sockets)
        self._check = check

    def handle_hup(self) -> None:
        try:
            self._check()
        except PolicyFileError as e:
            log.warning(
                f"SIGHUP: the workers keep running with the rules in force, the policies file does not "
                f"parse: {e.source} line {e.line}: {e.reason}",
                extra={"path": e.source, "line": e.line},
            )
            return
        except ConfigurationError as e:
            log.warning(f"SIGHUP: the workers keep running, a new one could not start: {e.message}")
            return
        super().handle_hup()


def serve_workers(app: str, **options: Any) -> None:
    """``uvicorn.run(app, **options)``, supervised by ``Supervisor`` when there is more than one worker."""
    if options.get("workers", 1) <= 1:
        uvicorn.run(app, **options)
        return
    config = uvicorn.Config(app, **options)
    sock = config.bind_socket()
    try:
        Supervisor(config, [sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
