"""The status page: the fleet at a glance, in a browser, for admins.

``GET /status`` serves one HTML page (plain HTML, JS and CSS from ``static/``: no build step,
nothing fetched from elsewhere) that polls ``GET /status/api/state`` every two seconds and
redraws hosts -> cards -> vLLM -> PaddleX with their state, in-flight and latency, the queue by
priority and token, the running jobs with their page progress and the gateway's CPU and memory.

A browser cannot send a bearer header by itself, so an admin logs in once with an admin token
(the form of ``GET /status/login``, posted to ``POST /status/login``) and gets a session
cookie (:mod:`gateway.status.session`): HttpOnly, ``SameSite=Strict``, path ``/status``,
signed, eight hours. The token never appears in a URL. The page itself holds no data and loads
for any top-level navigation (a link from Grafana or an alert); its script's first request
without a session gets 401 and goes to the login form. Programs (``fleetctl top``) read the
state API with an admin bearer token instead. Login, logout and the state API refuse
cross-site requests (``Sec-Fetch-Site``, else ``Origin``). A gateway without tokens (open
access) shows the page to everyone, as it does ``/upstreams``.
"""

from gateway.status.router import router

__all__ = ["router"]
