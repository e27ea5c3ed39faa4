"""Gateway configuration: one pydantic model for ``config.json``.

The seed's ``config.json`` loads unchanged (including ``//`` comments outside strings); every
key added since has a default. Validation errors name the offending key, for example
``load_balance.mode: unknown mode 'foo' (expected one of round_robin, random, ...)``.

Usage::

    from gateway.config.settings import load_settings, parse_settings
    settings = load_settings("/etc/paddleocr-fleet/gateway.json")   # raises ConfigError
    settings = parse_settings({"upstreams": ["http://127.0.0.1:9120"]})
    settings.load_balance.mode          # "queue" unless the file names one
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.config.store_url import check_postgres_url
from gateway.errors import ConfigError
from gateway.wire import paddlex_routes

log = logging.getLogger("gateway.settings")

POLICY_NAMES: tuple[str, ...] = ("round_robin", "random", "least_inflight", "p2c", "queue")
DEFAULT_MODE = "queue"

PolicyName = Literal["round_robin", "random", "least_inflight", "p2c", "queue"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class UpstreamSpec(_Section):
    """One PaddleX instance; the config may give a bare URL or an object with its topology."""

    url: str
    host: str | None = None
    card: int | str | None = None
    vllm: str | None = None
    container: str | None = None
    keeper: str | None = None  # the slice keeper in front of it (gateway.keeper): job slices

    @field_validator("url", "keeper")
    @classmethod
    def _check_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError(
                f"upstream {info.field_name} must start with http:// or https://, got {value!r}"
            )
        return value


class LoadBalanceSettings(_Section):
    """How requests are spread over upstreams (issue 4)."""

    mode: str = DEFAULT_MODE
    max_attempts: int = Field(12, ge=1)
    upstream_concurrency: int = Field(1, ge=1)  # queue mode: in-flight limit per upstream
    queue_max_depth: int = Field(512, ge=0)  # queue mode: waiting requests before 503
    queue_timeout_s: float = Field(120.0, gt=0)  # queue mode: longest wait before 503
    topology_aware: bool = True  # tie-break on the load of the upstream's vLLM, card, host
    # queue mode: an upstream's measured speed is forgotten after this long without a new
    # sample, so an upstream that was slow once gets work (and a new measurement) again
    speed_memory_s: float = Field(300.0, gt=0)

    @field_validator("mode")
    @classmethod
    def _check_mode(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(f"unknown mode {value!r} (expected one of {', '.join(POLICY_NAMES)})")
        return value


class HttpSettings(_Section):
    """The shared upstream client (:mod:`gateway.wire.upstream_http`) and the per-request time
    limits."""

    timeout_s: float = Field(300.0, gt=0)  # per attempt (both PaddleX calls of one document)
    connect_timeout_s: float = Field(5.0, gt=0)
    request_deadline_s: float = Field(900.0, gt=0)  # whole request incl. queueing and failover
    pool_max_connections: int = Field(200, ge=1)
    pool_max_keepalive_connections: int = Field(100, ge=0)
    # idle upstream connections are closed after this (uvicorn, serving PaddleX, closes at 5 s)
    pool_keepalive_s: float = Field(4.0, gt=0)


class HealthSettings(_Section):
    """Active probes of each upstream's ``/health``."""

    enabled: bool = True
    path: str = paddlex_routes.HEALTH
    interval_s: float = Field(5.0, gt=0)
    timeout_s: float = Field(2.0, gt=0)
    unhealthy_threshold: int = Field(3, ge=1)
    healthy_threshold: int = Field(2, ge=1)
    # probe timeouts in a row, while attempts are in flight, that make an upstream "stuck"
    # (its attempts are cancelled and re-dispatched); 0 turns this off
    stuck_after_timeouts: int = Field(2, ge=0)


class OutlierSettings(_Section):
    """Passive ejection after consecutive failures, and the panic threshold."""

    consecutive_failures: int = Field(5, ge=1)
    base_ejection_s: float = Field(30.0, ge=0)
    max_ejection_s: float = Field(300.0, ge=0)
    max_ejection_percent: float = Field(50.0, ge=0, le=100)
    panic_threshold_percent: float = Field(50.0, ge=0, le=100)


class RetryBudgetSettings(_Section):
    """Envoy-like budget: retries in flight <= max(min_retry_concurrency, percent of active)."""

    budget_percent: float = Field(20.0, ge=0, le=100)
    min_retry_concurrency: int = Field(3, ge=0)


class RemoveRepeatedHui(_Section):
    enabled: bool = True
    min_repeats: int = Field(2, ge=1)


class PostprocessSettings(_Section):
    strip_images: bool = True
    remove_repeated_hui: RemoveRepeatedHui = RemoveRepeatedHui()
    collapse_blank_lines: bool = True


class InputSettings(_Section):
    """Limits on what callers may send (sizes, URL fetches, local files, image and PDF
    bounds)."""

    max_request_bytes: int = Field(100 * 1024 * 1024, ge=1)
    local_path_roots: list[str] = Field(default_factory=list)  # empty: local_path disabled
    url_fetch_enabled: bool = True
    url_timeout_s: float = Field(30.0, gt=0)  # the whole fetch, redirects included
    url_max_bytes: int = Field(50 * 1024 * 1024, ge=1)
    url_max_redirects: int = Field(5, ge=0)
    # destinations that url fetches may reach although they are loopback/private/...:
    # host names, addresses or networks, each optionally with a port (gateway.wire.urlguard)
    url_allow: list[str] = Field(default_factory=list)
    # PIL's decompression-bomb limit: an A4 page scanned at 1200 dpi (139 MP) fits
    max_image_pixels: int = Field(178_956_970, ge=1)
    max_pages: int = Field(1000, ge=1)
    pdf_timeout_s: float = Field(10.0, gt=0)  # reading one PDF's page tree
    pdf_workers: int = Field(2, ge=1)  # processes that read PDFs (killed past the timeout)

    @field_validator("url_allow")
    @classmethod
    def _check_url_allow(cls, value: list[str]) -> list[str]:
        from gateway.wire.urlguard import parse_allow_entry

        for index, entry in enumerate(value):
            try:
                parse_allow_entry(entry)
            except ValueError as exc:
                raise ValueError(f"entry {index}: {exc}") from None
        return value


class TokenSpec(_Section):
    """One accepted bearer token: its name and SHA-256 (hex), never the token itself."""

    name: str
    sha256: str
    max_in_flight: int | None = Field(None, ge=1)  # requests of this token at once
    rate_per_s: float | None = Field(None, gt=0)  # token bucket, a second's worth of burst

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not value or len(value) > 64 or not all(c.isalnum() or c in "-_.@" for c in value):
            raise ValueError(f"token name must be 1-64 letters, digits or '-_.@', got {value!r}")
        return value

    @field_validator("sha256")
    @classmethod
    def _check_hash(cls, value: str) -> str:
        value = value.strip().lower()
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            raise ValueError("must be the 64 hex digits of the token's SHA-256")
        return value


class AuthSettings(_Section):
    """Bearer tokens (gateway.access.control). No token configured: the gateway is open."""

    tokens: list[TokenSpec] = Field(default_factory=list)  # document routes
    admin_tokens: list[TokenSpec] = Field(default_factory=list)  # also /upstreams, /metrics
    local_token_file: str | None = None
    """A root-only file in the gateway's container holding a token of its own, accepted as an
    admin token (gateway.access.local_token): the stack drains through `docker exec` with it."""

    @model_validator(mode="after")
    def _unique(self) -> AuthSettings:
        names: set[str] = set()
        hashes: set[str] = set()
        for key in ("tokens", "admin_tokens"):
            for index, spec in enumerate(getattr(self, key)):
                if spec.name in names:
                    raise ValueError(f"{key}[{index}]: duplicate token name {spec.name!r}")
                if spec.sha256 in hashes:
                    raise ValueError(f"{key}[{index}]: the same sha256 is listed twice")
                names.add(spec.name)
                hashes.add(spec.sha256)
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.tokens or self.admin_tokens)


class ServerSettings(_Section):
    """Connection bounds against slow and greedy clients (gateway.server.connections)."""

    header_timeout_s: float = Field(10.0, gt=0)  # request line and headers, from first byte
    body_timeout_s: float = Field(60.0, gt=0)  # the whole body, from the end of the headers
    keep_alive_s: float = Field(75.0, gt=0)  # idle keep-alive connections (read at start-up)
    max_connections: int = Field(1000, ge=1)  # open connections at once; beyond: 503
    max_connections_per_client: int = Field(100, ge=1)  # per client address; beyond: 429
    max_header_bytes: int = Field(16384, ge=1024)  # request line + headers (read at start-up)
    http: Literal["httptools", "h11"] = "httptools"  # uvicorn's HTTP parser (read at start-up)


class ReloadSettings(_Section):
    enabled: bool = True
    poll_interval_s: float = Field(1.0, gt=0)


class FanoutSettings(_Section):
    """Page slices of long PDFs over several instances (:mod:`gateway.upstream.fanout`), for jobs
    and, with ``sync``, for ``/ocr`` and ``/ocr-file``."""

    threshold_pages: int = Field(8, ge=1)  # PDFs of more pages than this are split
    max_slice_pages: int = Field(16, ge=1)  # slice size adapts to free capacity, up to this
    sync: bool = True  # /ocr and /ocr-file fan out too (jobs always do)


class JobsSettings(_Section):
    """The official PaddleOCR API job protocol (``/api/v2/ocr/jobs``, :mod:`gateway.jobs`).

    ``dir`` null: the job routes answer 503 (off). Read at start-up (a reload does not move
    the store)."""

    dir: str | None = None  # SQLite (WAL) store plus inputs and results; the Pulumi mount
    # a PostgreSQL shared by every gateway (gateway.jobs.postgres): postgresql://user:pw@h/db;
    # when set it is the store (dir is not used for jobs)
    store_url: str | None = None
    store_timeout_s: float = Field(5.0, gt=0)  # longest wait for the database before a 503
    store_pool_size: int = Field(8, ge=1)  # connections of one gateway process to it
    model: str = "PaddleOCR-VL-1.5"  # the model name clients must ask for
    max_pages: int = Field(1000, ge=1)  # pages per job (the hosted service's limit)
    slice_attempts: int = Field(3, ge=1)  # dispatch rounds of one slice before it is split
    lease_s: float = Field(30.0, gt=0)  # a slice's lease, renewed while it runs
    poll_interval_s: float = Field(0.5, gt=0)  # how often the runner looks for work
    retention_s: float = Field(7 * 86400.0, gt=0)  # finished jobs' inputs and results
    result_url_ttl_s: float = Field(86400.0, gt=0)  # lifetime of a signed jsonUrl
    max_disk_bytes: int = Field(20 * 1024**3, ge=1)  # the store's files; over it submit 503
    public_url: str | None = None  # base of jsonUrl (default: the request's base URL)
    callbacks_enabled: bool = True  # optional callbackUrl, SSRF-guarded like fileUrl

    @field_validator("store_url")
    @classmethod
    def _check_store_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        return check_postgres_url(value)

    @property
    def enabled(self) -> bool:
        """Whether the job routes have a store (``dir`` or ``store_url``)."""
        return self.dir is not None or self.store_url is not None


class Settings(_Section):
    """The whole gateway configuration (immutable; a reload builds a new one)."""

    upstreams: list[UpstreamSpec] = Field(default_factory=list)
    load_balance: LoadBalanceSettings = LoadBalanceSettings()
    http: HttpSettings = HttpSettings()
    health: HealthSettings = HealthSettings()
    outlier: OutlierSettings = OutlierSettings()
    retry_budget: RetryBudgetSettings = RetryBudgetSettings()
    postprocess: PostprocessSettings = PostprocessSettings()
    input: InputSettings = InputSettings()
    auth: AuthSettings = AuthSettings()
    server: ServerSettings = ServerSettings()
    reload: ReloadSettings = ReloadSettings()
    fanout: FanoutSettings = FanoutSettings()
    jobs: JobsSettings = JobsSettings()

    @field_validator("upstreams", mode="before")
    @classmethod
    def _upstreams_from_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"url": item} if isinstance(item, str) else item for item in value]
        return value

    @model_validator(mode="after")
    def _unique_urls(self) -> Settings:
        seen: set[str] = set()
        for index, spec in enumerate(self.upstreams):
            if spec.url in seen:
                raise ValueError(f"upstreams[{index}]: duplicate url {spec.url!r}")
            seen.add(spec.url)
        return self

    @property
    def upstream_urls(self) -> list[str]:
        return [spec.url for spec in self.upstreams]

    @property
    def keepers(self) -> dict[str, int]:
        """The slice keepers the upstreams name, each with how many upstreams name it."""
        return dict(Counter(spec.keeper for spec in self.upstreams if spec.keeper))


def strip_json_comments(text: str) -> str:
    """Remove ``//`` line comments and ``/* */`` block comments that are outside strings."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
        elif ch == '"':
            in_string = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _format_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ""
        for item in err["loc"]:
            loc += f"[{item}]" if isinstance(item, int) else (f".{item}" if loc else str(item))
        # mode/url errors carry our own text after "Value error, "
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc or '<root>'}: {msg}")
    return "; ".join(parts)


def _warn_unknown_keys(model: BaseModel, prefix: str = "") -> list[str]:
    unknown = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel) and not isinstance(value, UpstreamSpec):
            unknown += _warn_unknown_keys(value, f"{prefix}{name}.")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, TokenSpec):
                    unknown += _warn_unknown_keys(item, f"{prefix}{name}[{index}].")
    return unknown


def parse_settings(data: Any) -> Settings:
    """Validate a decoded config object; raise ConfigError naming the key on failure."""
    if not isinstance(data, dict):
        raise ConfigError("<root>: the config must be a JSON object")
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from None
    for key in _warn_unknown_keys(settings):
        log.warning("config: unknown key %s ignored", key)
    return settings


def parse_settings_text(text: str, source: str = "<config>") -> Settings:
    """Parse JSON text (``//`` comments allowed) into Settings."""
    try:
        data = json.loads(strip_json_comments(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: invalid JSON: {exc}") from None
    return parse_settings(data)


def load_settings(path: str | os.PathLike[str]) -> Settings:
    """Read and validate the config file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc}") from None
    return parse_settings_text(text, str(p))
