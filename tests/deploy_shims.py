"""Stand-ins for the system tools deploy.md's install block uses that a test cannot run for real: `sudo`,
`useradd`, `systemctl` and `journalctl`. The test writes a two-line script under each name into a folder
put first on PATH, which runs this one as ``deploy_shims.py FOLDER NAME ARGS…``; each checks that it is
called as the doc calls it and does the equivalent inside the test's folder. The settings are
``system.json`` in that folder: ``root`` (the folder that stands for ``/``), ``srv`` and the ``clone``.

- ``useradd`` records the user in ``<root>/etc/passwd``, and makes its home only when asked to
  (``--create-home``): for a ``--system`` user useradd makes none on its own.
- ``sudo CMD`` runs CMD as root; ``sudo -u USER CMD`` runs CMD as that user with sudo's clean
  environment (its ``secure_path``, ``HOME`` at the user's home). The test runs as one user, so what
  another would be denied is checked after the fact: a command run as USER may write under USER's home
  only, never elsewhere in ``srv`` nor in the clone (both another user's).
- ``systemctl enable --now tapgate`` enables the unit (the ``WantedBy`` link), runs its ``ExecStartPre``
  and then ``ExecStart`` in its ``WorkingDirectory`` with the environment systemd gives a ``User=``
  service, their output to the journal, and returns once the service is started, as for a simple
  service; a keeper process reaps it and writes its exit code and time to ``<root>/run/tapgate.exited``.
- ``journalctl -u tapgate -f -o cat`` prints the journal's messages and follows it until the service
  has stopped (the real one follows until Ctrl-C).
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHIMS, TOOL = sys.argv[1], sys.argv[2]
SETTINGS = json.loads((Path(SHIMS) / "system.json").read_text())
ROOT = Path(SETTINGS["root"])
FOLLOW_SECONDS = 900


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"{TOOL} (test stand-in): {message}\n")
    raise SystemExit(1)


def users() -> dict[str, str]:
    passwd = ROOT / "etc" / "passwd"
    lines = passwd.read_text().splitlines() if passwd.exists() else []
    return dict(line.split(":", 1) for line in lines)  # name:home


def useradd(args: list[str]) -> None:
    home, system, create = None, False, False
    words = iter(args[:-1])
    for word in words:
        if word in ("--system", "-r"):
            system = True
        elif word in ("--create-home", "-m"):
            create = True
        elif word in ("--home-dir", "--home", "-d"):
            home = next(words, None)
        elif word not in ("--user-group", "-U"):
            fail(f"{word} is not one of the options this stand-in knows")
    name = args[-1] if args else ""
    if not (system and home and name) or name in users():
        fail(f"expected --system, a --home-dir and a new user's name, got {args}")
    if create:
        Path(home).mkdir()  # useradd refuses a parent that is missing too
    with (ROOT / "etc" / "passwd").open("a") as passwd:
        passwd.write(f"{name}:{home}\n")


def snapshot(home: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under srv and the clone, except under ``home``: its mtime and size."""
    seen = {}
    for top in (SETTINGS["srv"], SETTINGS["clone"]):
        for folder, dirs, files in os.walk(top):
            if Path(folder) == home or home in Path(folder).parents:
                dirs.clear()
                continue
            for name in (*dirs, *files):
                path = Path(folder, name)
                if path != home:
                    stat = path.lstat()
                    seen[str(path)] = (stat.st_mtime_ns, stat.st_size)
    return seen


def sudo(args: list[str]) -> None:
    if args[:1] != ["-u"]:
        os.execvpe(args[0], args, {**os.environ, "PATH": f"{SHIMS}:{SECURE_PATH}"})  # noqa: S606
    user, command = args[1], args[2:]
    if user not in users():
        fail(f"sudo: unknown user {user}")
    home = Path(users()[user])
    if not home.is_dir():
        fail(f"{home} does not exist, and {user} may not make it: only root writes in {home.parent}")
    env = {
        "PATH": f"{SHIMS}:{SECURE_PATH}",
        "HOME": str(home),
        "USER": user,
        "LOGNAME": user,
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
    }
    before = snapshot(home)
    done = subprocess.run(command, env=env, check=False)
    after = snapshot(home)
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    if changed:
        fail(f"{user} may write under {home} only, but {shlex.join(command)} changed {changed[:5]}")
    raise SystemExit(done.returncode)


def unit(name: str) -> configparser.ConfigParser:
    path = ROOT / "etc" / "systemd" / "system" / f"{name}.service"
    if not path.exists():
        fail(f"Unit {name}.service does not exist.")
    parser = configparser.ConfigParser(interpolation=None, comment_prefixes=("#", ";"), strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(path.read_text())
    return parser


def service_environment(service: configparser.SectionProxy) -> dict[str, str]:
    user = service["User"]
    if user not in users():
        fail(f"Failed to determine user credentials: no user {user}")
    home = users()[user]
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "HOME": home, "USER": user,
            "LOGNAME": user, "SHELL": "/bin/sh", "LANG": "C.UTF-8"}  # fmt: skip


def systemctl(args: list[str]) -> None:
    if args != ["enable", "--now", "tapgate"]:
        fail(f"expected 'enable --now tapgate', got {args}")
    parsed = unit("tapgate")
    service = parsed["Service"]
    wants = ROOT / "etc" / "systemd" / "system" / f"{parsed['Install']['WantedBy']}.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "tapgate.service").symlink_to(ROOT / "etc" / "systemd" / "system" / "tapgate.service")
    env = service_environment(service)
    folder = service["WorkingDirectory"]
    if not Path(folder).is_dir():
        fail(f"Changing to the requested working directory failed: {folder}")
    run = ROOT / "run"
    run.mkdir(exist_ok=True)
    journal = (run / "journal").open("ab")
    before = subprocess.run(shlex.split(service["ExecStartPre"]), cwd=folder, env=env, stdout=journal,
                            stderr=journal, check=False)  # fmt: skip
    if before.returncode != 0:
        fail("Job for tapgate.service failed because the control process exited with error code.")
    keeper = (
        "import subprocess, sys, time; from pathlib import Path\n"
        "run = Path(sys.argv[1]); log = (run / 'journal').open('ab')\n"
        "main = subprocess.Popen(sys.argv[3:], cwd=sys.argv[2], stdout=log, stderr=log)\n"
        "(run / 'tapgate.pid').write_text(str(main.pid))\n"
        "code = main.wait()\n"
        "(run / 'tapgate.exited').write_text(f'{code} {time.time()}')\n"
    )
    subprocess.Popen(
        [sys.executable, "-c", keeper, str(run), folder, *shlex.split(service["ExecStart"])],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not (run / "tapgate.pid").exists():  # started: the main process is forked
        if time.monotonic() > deadline:
            fail("Job for tapgate.service timed out.")
        time.sleep(0.05)


def journalctl(args: list[str]) -> None:
    if args != ["-u", "tapgate", "-f", "-o", "cat"]:
        fail(f"expected '-u tapgate -f -o cat', got {args}")
    run = ROOT / "run"
    if not (run / "journal").exists():
        fail("No journal files were found.")
    deadline = time.monotonic() + FOLLOW_SECONDS
    pending = b""  # a line still being written
    with (run / "journal").open("rb") as journal:
        while time.monotonic() < deadline:
            stopped = (run / "tapgate.exited").exists()
            *lines, pending = (pending + journal.read()).split(b"\n")
            if stopped and pending:
                lines.append(pending)
            sys.stdout.write("".join(f"{line.decode(errors='replace')}\n" for line in lines))
            sys.stdout.flush()
            if stopped:
                return
            time.sleep(0.1)
    fail(f"the service was still running after {FOLLOW_SECONDS} s")


if __name__ == "__main__":
    {"sudo": sudo, "useradd": useradd, "systemctl": systemctl, "journalctl": journalctl}[TOOL](sys.argv[3:])
