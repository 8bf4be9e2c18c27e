"""The docs are tests: every `sh` block of docs/api.md, and of the README's "Run it yourself", runs in
order in one shell against the gateway the blocks themselves start (on a free port instead of the one
shown), keeping the variables the way the doc shows. A block's command that fails, an answer in the error
shape, or an answer whose fields differ from the JSON the doc shows under it fails the test."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.live import free_port
from tests.test_operator_commands import Lines

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
SECONDS = 300


@dataclass
class Block:
    code: str
    shown: str | None  # the JSON the doc shows right under it, if it does


def shell_blocks(markdown: str) -> list[Block]:
    """The ``sh`` blocks in order, each with the ``json`` block that follows it at once (if any)."""
    fences = list(FENCE.finditer(markdown))
    blocks = []
    for i, fence in enumerate(fences):
        if fence.group(1) != "sh":
            continue
        after = fences[i + 1] if i + 1 < len(fences) else None
        adjacent = after is not None and after.start() == fence.end() and after.group(1) == "json"
        blocks.append(Block(fence.group(2), after.group(2) if adjacent and after else None))
    return blocks


def section(markdown: str, heading: str) -> str:
    start = markdown.index(heading)
    end = markdown.find("\n## ", start + len(heading))
    return markdown[start : end if end != -1 else None]


def _script(blocks: list[Block]) -> str:
    # ERR reports each failing command; a stream cut by --max-time (curl exits 28) is the doc's intent.
    lines = [
        "set -o pipefail",
        'trap \'[[ "$BASH_COMMAND" == *--max-time* ]] || echo "@@failed: $BASH_COMMAND"\' ERR',
    ]
    for i, block in enumerate(blocks):
        lines += [f"printf '\\n@@block {i}\\n'", block.code]
    lines.append("printf '\\n@@end\\n'")
    return "\n".join(lines) + "\n"


def run_blocks(blocks: list[Block], folder: Path, port_shown: str, port: int) -> list[str]:
    """Run the blocks in one bash, in ``folder``, on ``port`` instead of the port shown; each block's
    output. Kills what the blocks left running."""
    with running_blocks(blocks, folder, port_shown, port) as outputs:
        return outputs


@contextlib.contextmanager
def running_blocks(blocks: list[Block], folder: Path, port_shown: str, port: int) -> Iterator[list[str]]:
    """As run_blocks, with what the blocks started in the background (a gateway, a phone) still running
    until the end of the ``with``."""
    for block in blocks:
        block.code = block.code.replace(port_shown, str(port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    process = subprocess.Popen(
        ["bash", "-c", _script(blocks)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=SECONDS)
        assert "@@end" in out, out[-3000:]
        failures = [line for line in out.splitlines() if line.startswith("@@failed")]
        assert not failures, "\n".join(failures) + "\n\n" + out[-4000:]
        yield re.split(r"^@@block \d+\n", out.split("@@end")[0], flags=re.MULTILINE)[1:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # the gateway and phones the blocks started
        process.wait(timeout=30)


def _answers(output: str) -> list[object]:
    """The JSON the block printed: the whole output (jq prints on many lines), else each line that is."""
    try:
        return [json.loads(output)]
    except ValueError:
        pass
    answers = []
    for line in output.splitlines():
        try:
            answers.append(json.loads(line))
        except ValueError:
            continue
    return answers


def check_answers(blocks: list[Block], outputs: list[str]) -> None:
    assert len(outputs) == len(blocks)
    for block, output in zip(blocks, outputs, strict=True):
        answers = _answers(output)
        for answer in answers:
            assert not (isinstance(answer, dict) and "error" in answer), (block.code, answer)
        if block.shown is None:
            continue
        try:
            shown = json.loads(block.shown)
        except ValueError:
            continue  # the doc shortened it with "…"
        objects = [a for a in answers if isinstance(a, dict | list)]
        assert objects, (block.code, output)
        got = objects[-1]
        if isinstance(shown, dict):
            assert isinstance(got, dict) and set(got) == set(shown), (block.code, got, shown)
        else:
            assert isinstance(got, list) and len(got) == len(shown), (block.code, got, shown)


def test_every_shell_block_of_the_api_guide_runs_in_order(tmp_path: Path) -> None:
    blocks = shell_blocks((ROOT / "docs" / "api.md").read_text())
    assert len(blocks) > 20
    check_answers(blocks, run_blocks(blocks, tmp_path, "8080", free_port()))


def test_the_readmes_make_serve_inits_once_and_serves_on_the_port_serve_args_give(tmp_path: Path) -> None:
    """`make serve SERVE_ARGS='--port N'`, as the README's first screen shows it for a taken 8080, run in
    a folder of its own with this test's venv as the Makefile's (its install step left out)."""
    readme = (ROOT / "README.md").read_text().replace("\n", " ")
    assert "make serve SERVE_ARGS='--port 8090'" in readme
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    make = ["make", "-s", "-f", str(ROOT / "Makefile"), "serve", f"VENV={sys.prefix}", "STAMP="]
    process = subprocess.Popen(
        [*make, f"SERVE_ARGS=--port {port}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        ready = subprocess.run(
            ["curl", "-s", "--retry", "60", "--retry-connrefused", "--retry-delay", "1",
             f"http://127.0.0.1:{port}/healthz"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert ready.stdout == '{"status":"ok"}', ready
        assert (tmp_path / "tapgate.toml").is_file() and (tmp_path / "tapgate.db").is_file()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        said, _ = process.communicate(timeout=60)
    assert "The operator token of tenant 'default' (shown once):" in said, said


def test_the_readmes_run_it_yourself_pairs_a_terminal_phone_on_its_own_port(tmp_path: Path) -> None:
    blocks = shell_blocks(section((ROOT / "README.md").read_text(), "## Run it yourself"))
    port = free_port()
    with running_blocks(blocks, tmp_path, "18231", port) as outputs:
        check_answers(blocks, outputs)
        paired = outputs[1].strip().splitlines()
        assert paired[-2] == "active"  # the consent's answer
        assert paired[-1].startswith("desk-lamp\t") and "granted: set_light" in paired[-1]
        assert f"Paired desk-lamp with http://127.0.0.1:{port}" in outputs[1]  # the link named serve's port
        assert outputs[2].strip().splitlines()[-1] == "done"
        work = tmp_path / "work"  # the README's own folder: nothing lands beside the clone's files
        assert {"lamp.pem", "lamp.json", "gateway"} <= {p.name for p in work.iterdir()}
        assert {p.name for p in tmp_path.iterdir()} == {"work"}
        _pair_as_the_readme_shows(work, port)


def test_deploys_local_ca_path_serves_https_by_name_and_the_tls_page(tmp_path: Path) -> None:
    """deploy.md's `tapgate tls init` block, with the name a phone would resolve (tapgate.local) made
    localhost, and both of its ports free ones."""
    blocks = shell_blocks(section((ROOT / "docs" / "deploy.md").read_text(), "## HTTPS for phones at home"))
    assert any("tapgate tls init" in block.code for block in blocks)
    http_port = free_port()
    for block in blocks:
        block.code = block.code.replace("tapgate.local", "localhost").replace("8080", str(http_port))
    blocks[0].code = f"export TAPGATE_HTTP_PORT={http_port}\n{blocks[0].code}"
    with running_blocks(blocks, tmp_path, "8443", free_port()) as outputs:
        check_answers(blocks, outputs)
        assert '{"status":"ready"}' in outputs[0]
        assert outputs[0].rstrip().endswith("200")
    settings = (tmp_path / "gateway" / "tapgate.toml").read_text()
    assert 'public_url = "https://localhost:' in settings


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_deploys_systemd_unit_is_one_systemd_accepts_without_a_warning(tmp_path: Path) -> None:
    """deploy.md's unit, with /srv/tapgate moved under a temporary folder whose .venv/bin/tapgate is this
    checkout's: `systemd-analyze verify` reads every setting and checks that each command is there."""
    markdown = section((ROOT / "docs" / "deploy.md").read_text(), "## A systemd unit")
    units = [fence.group(2) for fence in FENCE.finditer(markdown) if fence.group(1) == "ini"]
    assert len(units) == 1 and "/srv/tapgate/.venv/bin/tapgate serve" in units[0]
    srv = tmp_path / "srv"
    (srv / ".venv" / "bin").mkdir(parents=True)
    (srv / ".venv" / "bin" / "tapgate").symlink_to(Path(sys.executable).parent / "tapgate")
    unit = tmp_path / "tapgate.service"
    unit.write_text(units[0].replace("/srv/tapgate", str(srv)))
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert (verified.returncode, verified.stderr) == (0, "")


@pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy is not installed (.ci/run installs it)")
def test_deploys_caddyfile_is_one_caddy_accepts(tmp_path: Path) -> None:
    """deploy.md's Caddyfile, as `caddy validate` reads it: adapted and every module set up, nothing
    served and no certificate asked for."""
    markdown = section((ROOT / "docs" / "deploy.md").read_text(), "## HTTPS with a reverse proxy (Caddy)")
    caddyfile = next(fence.group(2) for fence in FENCE.finditer(markdown) if fence.group(1) == "")
    assert "reverse_proxy 127.0.0.1:8080" in caddyfile
    (tmp_path / "Caddyfile").write_text(caddyfile)
    home = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path)}
    validated = subprocess.run(
        ["caddy", "validate", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **home},
    )
    assert validated.returncode == 0, validated.stderr
    assert "Valid configuration" in validated.stdout + validated.stderr


def _pair_as_the_readme_shows(folder: Path, port: int) -> None:
    """The README's `tapgate pair` session, typed as shown, with the phone's command from its note."""
    readme = section((ROOT / "README.md").read_text(), "## Run it yourself")
    [console] = [m.group(2) for m in FENCE.finditer(readme) if m.group(1) == "console"]
    command = shlex.split(console.splitlines()[0].removeprefix("$ "))
    assert command[:2] == ["tapgate", "pair"]
    phone = re.search(r"`(tapgate device pair <that link> [^`]+)`", readme.replace("\n", " "))
    assert phone is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    env |= {"TAPGATE_CONFIG": "gateway/tapgate.toml", "TAPGATE_URL": f"http://127.0.0.1:{port}"}
    operator = Lines(*command[1:], cwd=folder, env=env)
    try:
        link = operator.expect(r"^(http://\S+/app/#pair=\S+)$")[1]
        assert link.startswith(f"http://127.0.0.1:{port}/app/#pair=")
        operator.expect("Waiting for the device")
        assert tapgate_in(folder, "device", "keygen", "phone.pem").returncode == 0
        words = shlex.split(phone[1].replace("<that link>", shlex.quote(link)))
        claimed = tapgate_in(folder, *words[1:])
        assert claimed.returncode == 0, claimed.stderr
        operator.expect("ana-phone\\) wants in; it can: sms_send, approvals \\(can approve for you\\)")
        operator.say(claimed.stdout.strip().splitlines()[-1].split()[-1])
        operator.expect("Paired ana-phone for ana; granted: sms_send, approvals\\.")
        assert operator.process.wait(timeout=30) == 0
    finally:
        operator.close()


def tapgate_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_the_example_manifests_the_docs_use_ship_and_declare_what_they_say() -> None:
    from tapgate.device.examples import LAMP_MANIFEST

    assert json.loads((ROOT / "examples" / "lamp.json").read_text()) == LAMP_MANIFEST
    phone = json.loads((ROOT / "examples" / "manifest.json").read_text())
    assert [c["name"] for c in phone] == ["sms_send", "phone_actions"]
    for doc in ("device-protocol.md", "api.md"):
        text = (ROOT / "docs" / doc).read_text()
        for name in re.findall(r"@(\S+\.json)", text):
            assert (ROOT / name).is_file(), f"{doc} uses {name}, which does not ship"


@pytest.mark.parametrize("doc", ["api.md", "device-protocol.md", "configuration.md"])
def test_the_docs_no_longer_say_built_things_are_coming(doc: str) -> None:
    text = (ROOT / "docs" / doc).read_text()
    assert "no push leaves the server" not in text.replace("\n", " ").replace(
        "With the flags off, no push leaves the server", ""
    )
    if doc == "api.md":
        assert "POST /v1/notices" not in section(text, "## Coming")


# configuration.md's terminal sessions: each `$ tapgate serve …` refusal runs as shown, in a folder
# `tapgate init` made, and says the first line the doc shows. A session the doc cannot show whole is
# listed here with the reason.
NOT_RUN = {
    "tapgate serve --config pol.toml": "the doc names pol.toml and its policies.yaml without showing them",
}


def _sessions(markdown: str) -> list[list[tuple[str, list[str]]]]:
    """Each plain fenced block that is a terminal session running `tapgate serve`: its commands, each
    with the lines shown under it."""
    sessions = []
    for fence in FENCE.finditer(markdown):
        text = fence.group(2)
        if fence.group(1) or not text.startswith("$ ") or "tapgate serve" not in text:
            continue
        steps: list[tuple[str, list[str]]] = []
        for line in text.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif line and steps:
                steps[-1][1].append(line)
        sessions.append(steps)
    return sessions


def _run_session(folder: Path, steps: list[tuple[str, list[str]]]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    made = subprocess.run(
        ["tapgate", "init", "--dir", "."], cwd=folder, env=env, capture_output=True, check=False
    )
    assert made.returncode == 0, made.stderr
    code = 0
    for command, shown in steps:
        if command.startswith("cat "):
            (folder / command.split()[1]).write_text("".join(f"{line}\n" for line in shown))
            continue
        if command == "echo $?":
            assert [str(code)] == shown
            continue
        if command.split("  #")[0].strip() in NOT_RUN:
            continue
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        code = done.returncode
        said = (done.stdout + done.stderr).strip().splitlines()
        if shown:
            assert said[:1] == shown[:1], (command, said, shown)


def test_configurations_refusals_are_the_ones_serve_really_prints(tmp_path: Path) -> None:
    sessions = _sessions((ROOT / "docs" / "configuration.md").read_text())
    assert len(sessions) >= 4
    for i, steps in enumerate(sessions):
        folder = tmp_path / str(i)
        folder.mkdir()
        _run_session(folder, steps)


USER_DOCS = ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]


@pytest.mark.parametrize("doc", USER_DOCS)
def test_no_doc_cites_the_design_file_a_user_does_not_have(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert "DESIGN" not in text, [line for line in text.splitlines() if "DESIGN" in line]


SOURCE_TEXT = {".py", ".js", ".html", ".css", ".mako", ".json", ".webmanifest", ".txt"}


def test_no_source_comment_or_page_cites_the_design_file_a_user_does_not_have() -> None:
    """Docstrings become ``--help`` and API descriptions; people read the pages and scripts served."""
    files = [
        path
        for folder in (ROOT / "src" / "tapgate", ROOT / "bench")
        for path in sorted(folder.rglob("*"))
        if path.suffix in SOURCE_TEXT and "__pycache__" not in path.parts
    ]
    assert len(files) > 200
    citing = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "DESIGN" in line or "\N{SECTION SIGN}" in line
    ]
    assert not citing, citing


def test_no_commands_help_cites_the_design_file_a_user_does_not_have() -> None:
    import typer
    from typer.testing import CliRunner

    from tapgate.cli import app

    def paths(command: object, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        for name, sub in getattr(command, "commands", {}).items():  # a group's commands
            yield from paths(sub, (*path, name))

    runner = CliRunner()
    seen = 0
    for path in paths(typer.main.get_command(app), ()):
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (path, shown.output)
        assert "DESIGN" not in shown.output, (path, shown.output)
        seen += 1
    assert seen > 30


INDENTED_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```\n", re.MULTILINE | re.DOTALL)


def indented_shell_blocks(markdown: str) -> list[Block]:
    """The ``sh`` blocks in order, those inside a list item too (indented with it)."""
    return [
        Block(textwrap.dedent(m.group(3)), None)
        for m in INDENTED_FENCE.finditer(markdown)
        if m.group(2) == "sh"
    ]


# What the README's "Run it yourself" leaves behind, which browser-app.md starts from (OPERATOR, the
# gateway on the README's port, ana).
_GATEWAY_AS_THE_README_LEAVES_IT = """OPERATOR=$(tapgate init --dir gateway | tail -n 1)
tapgate serve --config gateway/tapgate.toml --port 18231 >gateway/serve.log 2>&1 &
curl -s --retry 30 --retry-connrefused --retry-delay 1 http://127.0.0.1:18231/readyz
export TAPGATE_CONFIG=gateway/tapgate.toml
tapgate user add ana --name Ana
"""
# The phone: the browser app in the person's hand; here the terminal phone claims the link in its place,
# declaring what the app declares, and the code it shows is the one the person types.
_THE_PHONE_CLAIMS_THE_LINK = """tapgate device keygen phone.pem
tapgate device pair "$(jq -r .url pairing.json)" phone.pem ana-phone \\
  --capability '{"name": "phone_actions"}' --capability '{"name": "sms_send"}' \\
  | tail -n 1 | cut -d ' ' -f 3 > code.txt
"""


def test_the_browser_apps_pairing_runs_with_the_settings_init_writes(tmp_path: Path) -> None:
    pairing = section((ROOT / "docs" / "browser-app.md").read_text(), "## Pair a phone")
    start, consent = indented_shell_blocks(pairing)
    assert "CODE=123456" in consent.code and "$USER" not in pairing and "$GATEWAY" not in pairing
    consent.code = consent.code.replace("CODE=123456", "CODE=$(cat code.txt)")
    blocks = [
        Block(_GATEWAY_AS_THE_README_LEAVES_IT, None),
        start,
        Block(_THE_PHONE_CLAIMS_THE_LINK, None),
        consent,
    ]
    outputs = run_blocks(blocks, tmp_path, "18231", free_port())
    check_answers(blocks, outputs)
    assert (tmp_path / "pair.svg").read_text().startswith("<?xml")
    answer = json.loads(outputs[3])
    assert answer["device"]["status"] == "active", answer
    assert {c["name"] for c in answer["device"]["capabilities"] if c["granted"]} == {
        "phone_actions",
        "sms_send",
        "approvals",
    }


def test_the_agent_and_console_guides_commands_run_on_the_readmes_gateway(tmp_path: Path) -> None:
    """agents.md's and console.md's blocks, run after the README's (on its gateway, its running lamp and
    its variables), and the console sign-in page's own hint typed as it reads."""
    readme = shell_blocks(section((ROOT / "README.md").read_text(), "## Run it yourself"))
    agents = shell_blocks((ROOT / "docs" / "agents.md").read_text())
    console = shell_blocks((ROOT / "docs" / "console.md").read_text())
    assert len(agents) == 2 and len(console) == 1
    for block in (*readme, *console):
        block.code = block.code.replace("18231", "8080")  # one port for all three: the agents guide's
    blocks = [*readme, *agents, *console]
    port = free_port()
    with running_blocks(blocks, tmp_path, "8080", port) as outputs:
        check_answers(blocks, outputs)
        called = json.loads(outputs[len(readme) + 1])
        assert called["status"] == "done", called
        work = tmp_path / "work"
        link = (work / "link.txt").read_text().strip()
        assert link.startswith(f"http://127.0.0.1:{port}/console/link/")
        with httpx.Client(timeout=10) as browser:
            signed_in = browser.post(link, headers={"content-type": "application/x-www-form-urlencoded"})
            assert signed_in.status_code == 303 and signed_in.headers["location"] == "/console/devices"
        page = httpx.get(f"http://127.0.0.1:{port}/console/sign-in", timeout=10).text  # as the person sees it
        [hint] = re.findall(r"<code>(tapgate console link[^<]*)</code>", page)
        assert "--tenant" not in hint  # the tenant init made needs no naming
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
        env |= {"TAPGATE_CONFIG": "gateway/tapgate.toml", "TAPGATE_URL": f"http://127.0.0.1:{port}"}
        words = shlex.split(html.unescape(hint).replace("YOU", "ana"))
        done = subprocess.run(
            [sys.executable, "-m", "tapgate", *words[1:]], cwd=work, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"http://127.0.0.1:{port}/console/link/" in done.stdout
