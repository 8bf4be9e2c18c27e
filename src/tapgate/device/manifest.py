"""The bodies a device sends to join: its manifest, key and push target, for enrolment and pairing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tapgate.device.keyfile import algorithm_of, public_key_base64
from tapgate.domain.approvals import PrivateKey

__all__ = ["APPROVALS", "ManifestError", "device_body", "read_capabilities"]

APPROVALS = "approvals"  # the built-in a phone declares to show and sign the person's approvals


class ManifestError(Exception):
    """A --capability that is not a capability; the message says what to change."""


def read_capabilities(values: Sequence[str]) -> list[dict[str, Any]]:
    """Each value is a JSON object, or ``@file`` holding an object or a list of them, or a list itself.
    Raises ManifestError. The gateway checks each entry; this only reads them."""
    found: list[dict[str, Any]] = []
    for value in values:
        source = value
        if value.startswith("@"):
            try:
                source = Path(value[1:]).read_text()
            except OSError as e:
                raise ManifestError(
                    f"--capability {value}: the file cannot be read ({e.strerror})."
                ) from None
        try:
            data = json.loads(source)
        except ValueError:
            raise ManifestError(
                f"--capability {value}: not JSON; give an object like "
                '\'{"name": "set_light", "kind": "actuator", "description": "..."}\' or @file.json.'
            ) from None
        entries = data if isinstance(data, list) else [data]
        for entry in entries:
            if not isinstance(entry, dict):
                raise ManifestError(f"--capability {value}: each capability must be a JSON object.")
            found.append(entry)
    return found


def device_body(
    key: PrivateKey,
    device_id: str,
    name: str | None,
    kind: str,
    capabilities: list[dict[str, Any]],
    push: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``{device_id, name, kind, alg, public_key, push?, capabilities}``, as both enrolment and pairing
    take it; ``name`` defaults to the device id in words."""
    body: dict[str, Any] = {
        "device_id": device_id,
        "name": name or device_id.replace("-", " ").capitalize(),
        "kind": kind,
        "alg": str(algorithm_of(key)),
        "public_key": public_key_base64(key),
        "capabilities": capabilities,
    }
    if push is not None:
        body["push"] = push
    return body
