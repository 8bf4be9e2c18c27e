"""What a paired or enrolled phone remembers between runs, and the pairing link it starts from."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from tapgate.device.keyfile import write_private

__all__ = ["DEFAULT_STATE", "PairingLink", "PhoneState", "StateError", "parse_pairing_link"]

DEFAULT_STATE = Path("tapgate-phone.json")


class StateError(Exception):
    """A state file or pairing link that cannot be used; the message says what to change."""


@dataclass(frozen=True, slots=True)
class PhoneState:
    """The state file: the gateway, who the phone is, its token (a secret: the file is 0600) and its key."""

    gateway_url: str
    device_id: str
    token: str
    key_file: str

    def save(self, path: Path) -> None:
        """Write the state file, mode 0600, replacing an older one. Raises KeyFileError."""
        write_private(path, (json.dumps(asdict(self), indent=2) + "\n").encode(), force=True)

    @classmethod
    def load(cls, path: Path) -> PhoneState:
        """Raises StateError naming the file and what is wrong."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise StateError(
                f"There is no state file {path}; pair first ('tapgate device pair') or pass --state."
            ) from None
        except (OSError, ValueError) as e:
            raise StateError(f"The state file {path} cannot be read: {e}.") from None
        fields = ("gateway_url", "device_id", "token", "key_file")
        if not isinstance(data, dict) or not all(isinstance(data.get(f), str) and data[f] for f in fields):
            raise StateError(f"The state file {path} lacks one of {', '.join(fields)}; pair again.")
        return cls(**{f: data[f] for f in fields})


@dataclass(frozen=True, slots=True)
class PairingLink:
    gateway_url: str
    code: str


def parse_pairing_link(link: str) -> PairingLink:
    """The gateway and the code in a pairing link, ``<gateway>/app/#pair=<code>``.

    The code rides in the fragment (no server log sees it); the gateway is everything before ``/app/``
    (the link's origin when tapgate is served at the root). Raises StateError."""
    parts = urlsplit(link.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StateError("The pairing link must be an http(s) URL such as https://host/app/#pair=<code>.")
    fragment = dict(
        item.partition("=")[::2] for item in parts.fragment.split("&") if item.startswith("pair=")
    )
    code = unquote(fragment.get("pair", ""))
    if not code:
        raise StateError(
            "The pairing link has no '#pair=<code>' part; copy the whole link or scan the QR code."
        )
    base = next((parts.path[: -len(s)] for s in ("/app/", "/app") if parts.path.endswith(s)), "")
    return PairingLink(urlunsplit((parts.scheme, parts.netloc, base.rstrip("/"), "", "")), code)
