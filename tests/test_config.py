"""Settings: the file, the environment over it, the paired flags, and refusals that name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tapgate.cli import settings_file_text
from tapgate.config import Settings, load_settings
from tapgate.domain.errors import ConfigurationError


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("TAPGATE_"):
            monkeypatch.delenv(key)


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tapgate.toml"
    path.write_text(text)
    return str(path)


def test_the_library_defaults_keep_devices_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert not settings.device_channel_enabled and not settings.device_sms_enabled
    assert not settings.devices_enabled


@pytest.mark.parametrize(
    "text",
    [
        "device_channel_enabled = true\n",
        "device_sms_enabled = true\n",
        "device_channel_enabled = true\ndevice_sms_enabled = false\n",
    ],
)
def test_setting_only_one_of_the_paired_flags_is_refused_naming_both(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_settings(_file(tmp_path, text))
    assert "device_channel_enabled" in refused.value.message
    assert "device_sms_enabled" in refused.value.message


def test_the_environment_can_complete_or_break_the_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, "device_channel_enabled = true\n")
    monkeypatch.setenv("TAPGATE_DEVICE_SMS_ENABLED", "true")
    assert load_settings(path).devices_enabled
    monkeypatch.setenv("TAPGATE_DEVICE_SMS_ENABLED", "false")
    with pytest.raises(ConfigurationError, match="paired"):
        load_settings(path)


def test_the_environment_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(tmp_path, "ingest_daily_cap = 7\n")
    assert load_settings(path).ingest_daily_cap == 7
    monkeypatch.setenv("TAPGATE_INGEST_DAILY_CAP", "9")
    assert load_settings(path).ingest_daily_cap == 9


@pytest.mark.parametrize(
    ("text", "key", "why"),
    [
        ("ingest_daily_cap = 'lots'\n", "ingest_daily_cap", "must be a whole number"),
        ("invocation_timeout_seconds = 0\n", "invocation_timeout_seconds", "must be at least 1"),
        ("log_level = 'loud'\n", "log_level", "must be 'debug', 'info', 'warning' or 'error'"),
        ("ingest_daily_kap = 5\n", "ingest_daily_kap", "is not a tapgate setting"),
        ("[webpush]\nsubjct = 'x'\n", "webpush.subjct", "is not a tapgate setting"),
        (f"public_url = 'https://{'a' * 200}.example'\n", "public_url", "must be at most 200 characters"),
    ],
)
def test_a_bad_value_is_refused_with_its_key_and_reason(
    tmp_path: Path, text: str, key: str, why: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_settings(_file(tmp_path, text))
    assert f"{key} {why}" in refused.value.message or f"{key}: {why}" in refused.value.message
    assert "Input should" not in refused.value.message  # tapgate's words, not the library's


def test_init_writes_every_top_level_key_before_its_first_table(tmp_path: Path) -> None:
    lines = settings_file_text(tmp_path / "tapgate.db").splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("["))
    keys_after = [line for line in lines[first_table:] if line and line[0].isalpha()]
    assert keys_after, "the file has tables with keys"
    top_level = set(Settings.model_fields) - {"webpush", "apns", "fcm", "push_relays"}
    assert not [line for line in keys_after if line.split(" = ")[0] in top_level]


@pytest.mark.parametrize(
    ("appended", "says"),
    [
        (
            'public_url = "https://gw.example"\n',
            "webpush.public_url: is a top-level setting, but it stands under [webpush]",
        ),
        ('[fcm]\nsubject = "mailto:a@b.example"\n', "fcm.subject: belongs in the [webpush] table"),
    ],
)
def test_a_key_appended_under_the_wrong_table_names_the_table_it_belongs_to(
    tmp_path: Path, appended: str, says: str
) -> None:
    path = tmp_path / "tapgate.toml"
    path.write_text(settings_file_text(tmp_path / "tapgate.db") + appended)
    with pytest.raises(ConfigurationError) as refused:
        load_settings(str(path))
    assert says in refused.value.message
    assert "check its spelling" not in refused.value.message


def test_a_top_level_key_under_push_relays_is_not_taken_for_a_relay(tmp_path: Path) -> None:
    relays = 'relay_secret = "s"\n[push_relays]\nfcm = "https://relay.example/push"\n'
    for stray in ("notice_text = true", 'public_url = "https://gw.example"'):
        with pytest.raises(ConfigurationError) as refused:
            load_settings(_file(tmp_path, relays + stray + "\n"))
        key = stray.split(" = ")[0]
        message = refused.value.message
        assert key in message
        assert "is a top-level setting, but it stands under [push_relays]" in message


def test_a_file_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_settings(_file(tmp_path, "database_url = [\n"))


def test_a_named_file_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings(str(tmp_path / "missing.toml"))


def test_tapgate_config_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(tmp_path, "max_devices_per_user = 3\n")
    monkeypatch.setenv("TAPGATE_CONFIG", path)
    assert load_settings().max_devices_per_user == 3


def test_a_relative_sqlite_path_is_anchored_at_the_settings_file(tmp_path: Path) -> None:
    path = _file(tmp_path, 'database_url = "sqlite:///data/tapgate.db"\npolicies_file = "policies.yaml"\n')
    settings = load_settings(path)
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'tapgate.db'}"
    assert settings.policies_file == str(tmp_path / "policies.yaml")


def test_serve_refuses_a_half_paired_configuration_before_listening(tmp_path: Path) -> None:
    path = _file(tmp_path, "device_channel_enabled = true\n")
    run = subprocess.run(
        [sys.executable, "-m", "tapgate", "serve", "--config", path, "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    assert "device_channel_enabled and device_sms_enabled are paired" in run.stderr
    assert "Traceback" not in run.stderr
