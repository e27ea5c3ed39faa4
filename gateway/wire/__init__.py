"""The bytes on the wire, with no gateway state: fast JSON and the gateway's HTTP clients.

:mod:`~gateway.wire.jsonfast` is orjson plus the lifting of a large base64 string out of a body
without parsing it; :mod:`~gateway.wire.upstream_http` is the small keep-alive HTTP/1.1 client
the gateway and the slice keeper talk to PaddleX with; :mod:`~gateway.wire.urlguard` is the
guarded client for callers' URLs (no internal address unless the config opens it);
:mod:`~gateway.wire.keeper_protocol` names the headers the gateway and the slice keeper share;
:mod:`~gateway.wire.paddlex_routes` names PaddleX's routes, for everyone who calls PaddleX.
"""
