"""The browser phone app: its static files at /app under a strict Content-Security-Policy, and its config.

The files are plain ES modules with no inline script or style, so the policy allows nothing but this
origin. ``/app/config.json`` tells the app the one thing it cannot know by itself: the Web Push
application server key (the VAPID public key), or null where the operator configured none.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field
from starlette.datastructures import MutableHeaders
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",  # 'self' covers ws:/wss: to this origin
        "manifest-src 'self'",
        "worker-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), payment=()",
    # Revalidate every time (the ETag makes that cheap), so a fixed app reaches phones at once.
    "cache-control": "no-cache",
}

router = APIRouter(tags=["app"])


class AppConfig(BaseModel):
    vapid_public_key: str | None = Field(
        description="The Web Push application server key (base64url of the uncompressed P-256 point), "
        "or null when the gateway has no VAPID key"
    )


@router.get("/app/config.json", response_model=AppConfig, summary="What the browser phone app needs to start")
async def config(request: Request, response: Response) -> AppConfig:
    response.headers.update(SECURITY_HEADERS)
    return AppConfig(vapid_public_key=request.app.state.web_push_key)


class _Hardened:
    """Adds the security headers to every response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, hardened)


def static_app() -> ASGIApp:
    """The app's files from the installed package (``tapgate/web``), index.html at /app/."""
    return _Hardened(StaticFiles(packages=[("tapgate", "web")], html=True))
