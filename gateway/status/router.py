"""Routes of the status page (package doc): the page, its assets, login, logout, state."""

from __future__ import annotations

import weakref
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response

from gateway.api.common import RuntimeDep
from gateway.errors import AccessError
from gateway.status.session import COOKIE, COOKIE_PATH, LIFETIME_S, SessionKeys, same_origin
from gateway.status.state import StatusState

if TYPE_CHECKING:
    from gateway.runtime import Runtime

STATIC = Path(__file__).with_name("static")
ASSETS = {"status.js": "text/javascript", "status.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

router = APIRouter(prefix="/status", include_in_schema=False)

# Each runtime's status page state, made on the first request and gone with the runtime.
_STATUS_STATES: weakref.WeakKeyDictionary[Runtime, StatusState] = weakref.WeakKeyDictionary()


def _keys(request: Request) -> SessionKeys:
    runtime = request.app.state.runtime
    keys = getattr(runtime, "status_keys", None)
    if keys is None:
        keys = runtime.status_keys = SessionKeys(runtime.settings.auth)
    return keys


def _admin_digests(request: Request) -> dict[str, bytes]:
    auth = request.app.state.runtime.settings.auth
    return {spec.name: bytes.fromhex(spec.sha256) for spec in auth.admin_tokens}


def logged_in(request: Request) -> bool:
    """An open gateway (no tokens), or a valid session cookie."""
    if not request.app.state.runtime.settings.auth.enabled:
        return True
    return _keys(request).verify(request.cookies.get(COOKIE), _admin_digests(request)) is not None


def _page(name: str, status: int = 200, message: str = "") -> HTMLResponse:
    html = (STATIC / name).read_text().replace("{{message}}", escape(message))
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _refused(status: int, code: str, message: str) -> JSONResponse:
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _navigation(request: Request) -> bool:
    """A top-level navigation (a link, a typed URL) or a same-origin request: what may open a
    page. A page holds no data (its script fetches the state, same-origin only) and no frame
    may hold it, so a link from elsewhere (Grafana, an alert) may open it."""
    mode = request.headers.get("sec-fetch-mode")
    dest = request.headers.get("sec-fetch-dest")
    return (mode == "navigate" and dest == "document") or same_origin(request)


@router.get("")
async def page(request: Request) -> Response:
    """The page. Without a session it still loads: its first poll gets 401 and sends the
    browser to the login form (a cookie that is SameSite=Strict is not sent with a navigation
    from another site, but is with the page's own requests)."""
    if not _navigation(request):
        return _refused(403, "cross_site", "the status page refuses cross-site requests")
    return _page("index.html")


@router.get("/login")
async def login_form(request: Request) -> Response:
    if not _navigation(request):
        return _refused(403, "cross_site", "the status page refuses cross-site requests")
    return _page("login.html")


@router.get("/static/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        return _refused(404, "not_found", f"no asset {name!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name], headers=SECURITY_HEADERS)


@router.post("/login")
async def login(request: Request) -> Response:
    if not same_origin(request):
        return _refused(403, "cross_site", "the status page refuses cross-site requests")
    form = await request.form()
    token = str(form.get("token") or "")
    access = request.app.state.runtime.access
    try:
        principal = access.authenticate(f"Bearer {token}", admin=True)
    except AccessError as exc:
        return _page("login.html", 401 if exc.status == 401 else 403, exc.message)
    digests = _admin_digests(request)
    if principal.name not in digests:  # the gateway's local token, or an open gateway
        return _page("login.html", 403, "log in with an admin token of the config")
    response = RedirectResponse("/status", status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(
        COOKIE,
        _keys(request).issue(principal.name, digests[principal.name]),
        max_age=LIFETIME_S,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    if not same_origin(request):
        return _refused(403, "cross_site", "the status page refuses cross-site requests")
    response = RedirectResponse("/status", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


@router.get("/api/state")
async def state(request: Request, runtime: RuntimeDep) -> Response:
    if not same_origin(request):
        return _refused(403, "cross_site", "the status page refuses cross-site requests")
    authorization = request.headers.get("authorization")
    if authorization is not None:  # a program (fleetctl top): an admin bearer token, no cookie
        try:
            runtime.access.authenticate(authorization, admin=True)
        except AccessError as exc:
            return _refused(exc.status, exc.code, exc.message)
    elif not logged_in(request):
        return _refused(401, "unauthorized", "log in at /status first")
    status_state = _STATUS_STATES.get(runtime)
    if status_state is None:
        status_state = _STATUS_STATES[runtime] = StatusState()
    return JSONResponse(await status_state.document(runtime), headers=SECURITY_HEADERS)
