"""A link as a QR code (SVG), for a person to scan with the phone that pairs or signs in.

segno is imported at the first code drawn: a server that never shows one (most of them, most of the
time) does not keep it loaded (1.2 MiB).
"""

from __future__ import annotations

import io


def svg(url: str, scale: int, title: str) -> bytes:
    import segno  # here, not at the top: see the module's docstring

    out = io.BytesIO()
    segno.make(url, error="m").save(out, kind="svg", scale=scale, border=2, title=title)
    return out.getvalue()
