"""The fleet's settings: one validated, frozen object read once from the stack's config.

No Pulumi import here: the stack program hands over the raw config values (strings, or JSON
strings for structured values) and gets back a `FleetSettings` or a `ConfigError` that names the
key and the problem.

    >>> settings = load_settings({"cards": "2", "accelerator": "sim"})
    >>> settings.hosts[0].card_ids
    (0, 1)
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from gateway.config.store_url import check_postgres_url

AcceleratorName = Literal["ascend", "nvidia", "sim"]
GatewayLayout = Literal["single", "per-host"]
JobsStore = Literal["sqlite", "postgres"]
LOCAL_DOCKER = "unix:///var/run/docker.sock"


class ConfigError(ValueError):
    """Invalid stack configuration; the message names the config key and the problem."""


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
    )


Port = Annotated[int, Field(ge=1, le=65535)]
"""A TCP port number."""
SECRET_KEYS = ("tokens", "adminTokens", "jobsStoreUrl")
"""Config keys that hold credentials: accepted only as Pulumi secrets."""
TOKEN_NAME = r"^[A-Za-z0-9_.@-]{1,64}$"
RECYCLER_TOKEN_NAME = "recycler"
"""The admin token the stack makes for its recyclers (components/recycler.py)."""


def _check_token(token: SecretStr) -> SecretStr:
    if len(token.get_secret_value()) < 16:
        raise ValueError("a token must have at least 16 characters")
    return token


class TokenEntry(_Model):
    """One user token (`tokens.NAME`): the token, or an object with it and its quotas."""

    token: SecretStr
    max_in_flight: int | None = Field(default=None, ge=1)
    rate_per_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _plain_token(cls, value: Any) -> Any:
        return {"token": value} if isinstance(value, str) else value

    _token = field_validator("token")(_check_token)


class HostSettings(_Model):
    """One Docker host of the fleet (`hosts[i]` in config)."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
    endpoint: str | None = Field(
        default=None,
        description="Docker endpoint: unix:///var/run/docker.sock, ssh://user@host, tcp://host:2376",
    )
    address: str = Field(default="127.0.0.1", description="where the gateway reaches this host")
    accelerator: AcceleratorName = "ascend"
    card_ids: tuple[int, ...] = Field(min_length=1)
    vllm_base_port: Port
    paddlex_base_port: Port
    port_first_card: int | None = None
    platform: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$",
        description="the host's Docker platform, e.g. linux/arm64 (images are built and pulled "
        "for it)",
    )
    build_args: dict[str, str] = Field(
        default_factory=dict,
        description="build args of the gateway image when it is built on this host "
        "(BASE_IMAGE, PIP_INDEX_URL, ...)",
    )
    former_names: tuple[str, ...] = Field(
        default=(),
        description="earlier names of this host: its resources are renamed, not replaced",
    )

    @field_validator("card_ids")
    @classmethod
    def _cards_unique_and_non_negative(cls, ids: tuple[int, ...]) -> tuple[int, ...]:
        for card in ids:
            if card < 0:
                raise ValueError(f"card id {card} is negative")
        repeated = sorted({c for c in ids if ids.count(c) > 1})
        if repeated:
            raise ValueError(f"card ids repeated: {repeated}")
        return ids

    @property
    def is_local(self) -> bool:
        return self.endpoint is None or self.endpoint.startswith("unix://")

    @property
    def docker_endpoint(self) -> str:
        """The endpoint the provider and every `docker` CLI call use: always explicit, so an
        exported DOCKER_HOST cannot send them to different engines (an exported DOCKER_CONTEXT,
        which pulumi-docker puts ahead of `host`, is refused: `fleet.check_environment`)."""
        return self.endpoint or LOCAL_DOCKER


class RecycleSettings(_Model):
    """Recycling of PaddleX instances (`recycle.*`, off unless set): a recycler on each host
    restarts, one at a time, an instance whose container memory passed `maxMemoryMb` or that
    served `maxDocuments` attempts since its last restart, drained before and undrained after
    (gateway/recycler, components/recycler.py)."""

    max_memory_mb: int | None = Field(
        default=None, gt=0, description="container memory in use (as `docker stats` shows it)"
    )
    max_documents: int | None = Field(
        default=None, gt=0, description="attempts served since the instance's last restart"
    )
    check_interval_s: float = Field(default=30, ge=1, description="seconds between checks")
    min_uptime_s: float = Field(
        default=300,
        ge=0,
        description="an instance younger than this is never recycled (a memory limit below "
        "what a fresh instance needs must not restart it over and over)",
    )

    @model_validator(mode="after")
    def _some_limit(self) -> RecycleSettings:
        if self.max_memory_mb is None and self.max_documents is None:
            raise ValueError("give maxMemoryMb, maxDocuments or both (or remove 'recycle')")
        return self


class BalancerSettings(_Model):
    """The L7 balancer in front of the gateways (`balancer.*`, with `gatewayLayout: per-host`):
    HAProxy, least connections, active checks of each gateway's `/ready`."""

    kind: str = "haproxy"
    host: str | None = Field(default=None, description="the host it runs on (default: the first)")
    port: Port = 9180
    image: str | None = Field(
        default=None, description="a prebuilt image; default: build config/balancer/Dockerfile"
    )
    container_name: str = "paddleocr-fleet-balancer"
    check_interval_s: float = Field(default=2.0, gt=0, description="gateway checks, seconds")

    @field_validator("kind")
    @classmethod
    def _haproxy_only(cls, kind: str) -> str:
        if kind != "haproxy":
            raise ValueError(
                f"{kind!r} is not offered: use 'haproxy' (open-source nginx has no active health "
                "checks, so it would keep sending documents to a gateway whose host cannot serve)"
            )
        return kind


Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A share of requests, 0 (none) to 1 (all)."""


class SimVllmFaults(_Model):
    """A bad release on sim hosts (`simVllmFaults`, none unless set): each simulated vLLM
    garbles, empties or fails (HTTP 500 with vLLM's JSON error body) these shares of its
    completions, at most one of the three per completion, and independently adds `slowSeconds`
    to `slowShare` of them. The choice is a stable draw from `seed` and the completion's number
    in the container's arrival order (sim/vllm/faults.py). Rendered into the vLLM containers'
    environment, so a change replaces them, as a new release would.

    >>> SimVllmFaults.model_validate({"garble": 0.3, "fail": "0.05"}).fail
    0.05
    """

    garble: Share = Field(default=0.0, description="text replaced by random letters and digits")
    empty: Share = Field(default=0.0, description="an empty text")
    fail: Share = Field(default=0.0, description="HTTP 500, vLLM's JSON error body")
    slow_share: Share = 0.0
    slow_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    seed: int = 0

    @model_validator(mode="after")
    def _consistent(self) -> SimVllmFaults:
        total = self.garble + self.empty + self.fail
        if total > 1 + 1e-9:
            raise ValueError(
                f"garble + empty + fail = {total:g}, more than 1 (each completion gets at most "
                "one of them)"
            )
        if self.slow_share > 0 and self.slow_seconds == 0:
            raise ValueError("slowShare needs slowSeconds, the seconds added (> 0)")
        if self.slow_seconds > 0 and self.slow_share == 0:
            raise ValueError("slowSeconds needs slowShare, the share of completions slowed (> 0)")
        return self

    def env_value(self) -> str:
        """The JSON text the sim vLLM reads from `VLLM_SIM_FAULTS`.

        >>> SimVllmFaults(garble=0.25).env_value()
        '{"garble":0.25,"empty":0.0,"fail":0.0,"slowShare":0.0,"slowSeconds":0.0,"seed":0}'
        """
        return json.dumps(self.model_dump(by_alias=True), separators=(",", ":"))


class FleetSettings(_Model):
    """Everything `pulumi up` needs, validated. Field aliases are the config keys (camelCase)."""

    hosts: tuple[HostSettings, ...] = Field(min_length=1)
    vllm_per_card: int = Field(default=2, gt=0)
    paddlex_per_vllm: int = Field(default=3, gt=0)
    port_stride: int = Field(default=10, gt=0)

    vllm_image: str | None = None
    paddlex_image: str | None = None
    model_dir: str = "/opt/its/model/PaddleOCR"
    served_model_name: str = Field(default="PaddleOCR-VL-1.5-0.9B", min_length=1)
    model_path: str | None = None

    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_num_batched_tokens: int = Field(default=16384, gt=0)
    vllm_extra_args: tuple[str, ...] = ()

    pipeline_batch_size: int = Field(default=128, gt=0)
    layout_batch_size: int = Field(default=32, gt=0)
    vl_batch_size: int = Field(default=16384, gt=0)
    doc_preprocessor_batch_size: int = Field(default=16, gt=0)

    vllm_ready_timeout: int = Field(default=900, gt=0, description="seconds")
    paddlex_ready_timeout: int = Field(default=600, gt=0, description="seconds")
    ready_poll_interval: int = Field(default=2, gt=0, description="seconds")

    max_unavailable_groups: float | None = Field(
        default=None,
        gt=0,
        description="how many vLLM groups (a vLLM and the PaddleX bound to it) of a host a "
        "replacing update takes out of service at once: a count, or a fraction of the host's "
        "groups (0.25: a quarter, at least one); default 2, at most half the host's groups",
    )
    max_unavailable_cards: float | None = Field(
        default=None,
        gt=0,
        description="instead of maxUnavailableGroups: waves of whole cards, a count or a "
        "fraction of the host's cards",
    )
    drain_timeout: int = Field(
        default=900,
        gt=0,
        le=3600,
        description="seconds a card's in-flight documents get to finish before its containers "
        "are replaced (a long PDF takes minutes)",
    )
    sim_vllm_load_seconds: float | None = Field(
        default=None,
        ge=0,
        description="sim hosts only: how long each simulated vLLM takes to load its model",
    )
    sim_paddlex_load_seconds: float | None = Field(
        default=None,
        ge=0,
        description="sim hosts only: how long each simulated PaddleX takes to start",
    )
    sim_vllm_faults: SimVllmFaults | None = Field(
        default=None,
        description="sim hosts only: a bad release, shares of the simulated vLLM's completions "
        "garbled, empty, failed or slowed",
    )

    @field_validator("max_unavailable_groups", "max_unavailable_cards")
    @classmethod
    def _count_or_fraction(cls, value: float | None) -> float | None:
        if value is not None and value >= 1 and value != int(value):
            raise ValueError("must be a whole number (>= 1) or a fraction below 1")
        return value

    gateway_port: Port = 9101
    gateway_host: str | None = None
    gateway_image: str | None = None
    gateway_container_name: str = "paddleocr-fleet-gateway"
    gateway_jobs_dir: str | None = Field(
        default=None,
        description="host folder of the gateway's job store (default "
        "/var/lib/paddleocr-fleet/<stack>/jobs); it outlives the gateway container",
    )
    gateway: dict[str, Any] = Field(default_factory=dict)
    keeper: bool = Field(
        default=True,
        description="a slice keeper beside each gateway: job slices running when the gateway "
        "dies are not parsed again",
    )
    keeper_port: Port = 9102
    gateway_layout: GatewayLayout = Field(
        default="single",
        description="single: one gateway over every PaddleX; per-host: a gateway per host over "
        "its own PaddleX, behind one balancer",
    )
    balancer: BalancerSettings | None = None
    recycle: RecycleSettings | None = None

    monitoring: bool = Field(
        default=False,
        description="Prometheus on the gateway's host, scraping every gateway and vLLM and its "
        "own host's keeper, with the fleet's alert rules (monitoring/)",
    )
    prometheus_port: Port = 9090
    exporter_port: Port = Field(
        default=9104,
        description="with monitoring: the port of the exporter on every host (its containers' "
        "memory and state, read from the host's Docker engine)",
    )
    prometheus_image: str | None = Field(
        default=None, description="a prebuilt Prometheus image instead of monitoring/Dockerfile"
    )
    prometheus_data_dir: str | None = Field(
        default=None,
        description="host folder of Prometheus' data (default "
        "/var/lib/paddleocr-fleet/<stack>/prometheus); it outlives the container",
    )
    prometheus_retention: str = Field(
        default="15d", pattern=r"^[0-9]+(ms|s|m|h|d|w|y)$", description="how long data is kept"
    )
    prometheus_retention_size: str = Field(
        default="2GB",
        pattern=r"^[0-9]+(B|KB|MB|GB|TB|PB|EB)$",
        description="the most data kept on disk (the oldest goes first)",
    )

    tokens: dict[str, TokenEntry] = Field(default_factory=dict)
    admin_tokens: dict[str, SecretStr] = Field(default_factory=dict)
    allow_open_access: bool = False
    jobs_store_url: SecretStr | None = Field(
        default=None,
        description="a PostgreSQL every gateway keeps its jobs in (postgresql://user:password@"
        "host:port/database; a secret): a job accepted by one gateway runs on and is served "
        "by every gateway (gateway/jobs/postgres.py); unset: each gateway's own SQLite store",
    )

    jobs_store: JobsStore = Field(
        default="sqlite",
        description="sqlite: each gateway's own store; postgres: the stack deploys a PostgreSQL "
        "every gateway keeps its jobs in (components/jobstore.py)",
    )
    jobs_store_host: str | None = Field(
        default=None, description="with jobsStore postgres: its host (default: the first gateway's)"
    )
    jobs_store_port: Port = 5432
    jobs_store_data_dir: str | None = Field(
        default=None,
        description="host folder of the stack's PostgreSQL (default "
        "/var/lib/paddleocr-fleet/<stack>/postgres); it outlives the container",
    )

    @field_validator("jobs_store_url")
    @classmethod
    def _store_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None:
            check_postgres_url(url.get_secret_value())
        return url

    @field_validator("tokens", "admin_tokens")
    @classmethod
    def _token_names(cls, tokens: dict[str, Any]) -> dict[str, Any]:
        for name in tokens:
            if not re.fullmatch(TOKEN_NAME, name):
                raise ValueError(f"token name {name!r}: use 1-64 letters, digits or '-_.@'")
        return tokens

    @field_validator("admin_tokens")
    @classmethod
    def _admin_tokens(cls, tokens: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for token in tokens.values():
            _check_token(token)
        return tokens

    @field_validator("model_dir", "gateway_jobs_dir", "prometheus_data_dir", "jobs_store_data_dir")
    @classmethod
    def _host_dir_absolute(cls, path: str | None) -> str | None:
        if path is not None and not path.startswith("/"):
            raise ValueError(
                f"must be an absolute path on the host ({path!r} is relative; Docker mounts "
                "only absolute host paths)"
            )
        return path

    @property
    def memory_fraction(self) -> float:
        """The vLLM `--gpu-memory-utilization` of each instance (default 0.9 / vLLM per card)."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return round(0.9 / self.vllm_per_card, 4)

    @property
    def container_model_path(self) -> str:
        return self.model_path or f"/data/{self.served_model_name}"

    @property
    def balancer_settings(self) -> BalancerSettings:
        return self.balancer or BalancerSettings()

    @property
    def shares_jobs(self) -> bool:
        """Every gateway keeps its jobs in one PostgreSQL: the stack's own or `jobsStoreUrl`."""
        return self.jobs_store_url is not None or self.jobs_store == "postgres"

    @property
    def gateway_host_settings(self) -> HostSettings:
        name = self.gateway_host or self.hosts[0].name
        return next(h for h in self.hosts if h.name == name)


# Keys that describe one implicit host when `hosts` is not set; with `hosts`, the defaults of each.
_HOST_DEFAULT_KEYS = (
    "cards",
    "cardIds",
    "accelerator",
    "vllmBasePort",
    "paddlexBasePort",
    "portFirstCard",
    "dockerHost",
    "hostAddress",
    "platform",
    "buildArgs",
)
_FLEET_KEYS = tuple(to_camel(f) for f in FleetSettings.model_fields if f != "hosts")
KNOWN_KEYS = frozenset((*_HOST_DEFAULT_KEYS, *_FLEET_KEYS, "hosts"))


def load_settings(raw: Mapping[str, str], secret_keys: Collection[str] = ()) -> FleetSettings:
    """Validate raw config values (key without project prefix -> string) into `FleetSettings`.

    `secret_keys` names the keys Pulumi holds as secrets; credentials must be among them.
    Raises `ConfigError` naming the key on any problem; nothing is half-applied.
    """
    for key in SECRET_KEYS:
        if key in raw and key not in secret_keys:
            raise ConfigError(
                f"config key '{key}': must be a secret, or its plaintext is stored in the stack's "
                f"config file: pulumi config set --secret --path '{key}.NAME' TOKEN"
            )
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        key = unknown[0]
        hint = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
        suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
        raise ConfigError(f"config key '{key}': unknown setting{suggestion}")
    values = {key: _decode(key, value) for key, value in raw.items()}
    host_defaults = {k: values.pop(k) for k in _HOST_DEFAULT_KEYS if k in values}
    hosts_raw = values.pop("hosts", None)
    if hosts_raw is None:
        hosts = [_implicit_host(host_defaults)]
    else:
        if not isinstance(hosts_raw, list) or not hosts_raw:
            raise ConfigError("config key 'hosts': must be a non-empty list of host objects")
        hosts = [_host_entry(i, h, host_defaults) for i, h in enumerate(hosts_raw)]
    try:
        settings = FleetSettings.model_validate({**values, "hosts": hosts})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, implicit_host=hosts_raw is None)) from None
    _check_cross_field(settings)
    return settings


def _decode(name: str, value: Any, key: str | None = None) -> Any:
    """Pulumi hands top-level values over as strings and structured ones as JSON text.

    `name` is the setting's own name, `key` the full config key for messages (default: name).
    """
    key = key or name
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config key '{key}': not valid JSON ({exc.msg})") from None
    if name == "cardIds":
        return [part for part in re.split(r"[,\s]+", text) if part]
    if name == "vllmExtraArgs":
        return shlex.split(text)
    return value


def _implicit_host(defaults: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "local"}
    if "dockerHost" in defaults:
        entry["endpoint"] = defaults["dockerHost"]
    if "hostAddress" in defaults:
        entry["address"] = defaults["hostAddress"]
    elif "dockerHost" in defaults:
        entry["address"] = _address_of(str(defaults["dockerHost"]), "dockerHost")
    return _with_host_defaults(entry, defaults, key_prefix="")


def _host_entry(index: int, entry: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
    key = f"hosts[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"config key '{key}': must be an object with name, endpoint, ...")
    if not entry.get("name"):
        raise ConfigError(f"config key '{key}.name': missing")
    if not entry.get("endpoint"):
        raise ConfigError(
            f"config key '{key}.endpoint': missing (the Docker endpoint of host "
            f"'{entry['name']}', e.g. ssh://user@host or {LOCAL_DOCKER})"
        )
    # `pulumi config set --path 'hosts[1].cardIds' '[0,1]'` stores the nested value as text.
    entry = {k: _decode(k, v, key=f"{key}.{k}") for k, v in entry.items()}
    if "address" not in entry:
        entry["address"] = _address_of(entry["endpoint"], f"{key}.endpoint")
    return _with_host_defaults(entry, defaults, key_prefix=f"{key}.")


def _with_host_defaults(
    entry: dict[str, Any], defaults: Mapping[str, Any], key_prefix: str
) -> dict[str, Any]:
    for key in (
        "accelerator",
        "vllmBasePort",
        "paddlexBasePort",
        "portFirstCard",
        "platform",
        "buildArgs",
    ):
        if key not in entry and key in defaults:
            entry[key] = defaults[key]
    entry.setdefault("accelerator", "ascend")
    entry.setdefault("vllmBasePort", 9025)
    entry.setdefault("paddlexBasePort", 9120)
    if "cardIds" not in entry:
        if "cardIds" in defaults:
            entry["cardIds"] = defaults["cardIds"]
        else:
            count = entry.pop("cards", defaults.get("cards", 8))
            entry["cardIds"] = list(range(_positive_int(f"{key_prefix}cards", count)))
    elif "cards" in entry:
        raise ConfigError(f"config key '{key_prefix}cards': give either cards or cardIds, not both")
    return entry


def _positive_int(key: str, value: Any) -> int:
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) <= 0:
        raise ConfigError(f"config key '{key}': must be a positive integer, got {value!r}")
    return int(text)


def _address_of(endpoint: str, key: str) -> str:
    parsed = urlparse(endpoint)
    if parsed.scheme == "unix":
        return "127.0.0.1"
    if parsed.scheme in ("ssh", "tcp", "http", "https") and parsed.hostname:
        return parsed.hostname
    raise ConfigError(
        f"config key '{key}': unsupported Docker endpoint {endpoint!r} "
        "(expected unix://, ssh://user@host or tcp://host:port)"
    )


def _describe(exc: ValidationError, implicit_host: bool) -> str:
    problems = []
    errors = exc.errors()
    for error in errors:
        if error["loc"] == ("hosts",) and len(errors) > 1:
            continue  # a consequence of an invalid host, which has its own message
        key = _key_of(error["loc"], implicit_host)
        got = error.get("input")
        credential = error["loc"][:1] in (
            ("tokens",), ("admin_tokens",), ("adminTokens",), ("jobs_store_url",),
            ("jobsStoreUrl",),
        )  # fmt: skip
        shown = "" if credential or isinstance(got, dict | list | tuple) else f", got {got!r}"
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"config key '{key}': {message}{shown}")
    return "; ".join(problems)


def _key_of(loc: tuple[Any, ...], implicit_host: bool) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    key = "".join(parts)
    if implicit_host:  # the one implicit host is configured by top-level keys: name those
        key = re.sub(r"^hosts\[0\]\.", "", key)
    return key


def _check_cross_field(settings: FleetSettings) -> None:
    if settings.monitoring and settings.tokens and not settings.admin_tokens:
        raise ConfigError(
            "config key 'monitoring': Prometheus reads the gateway's /metrics with an admin "
            "token, and this stack has user tokens only: add one with `pulumi config set "
            '--secret --path adminTokens.prometheus "$(openssl rand -hex 32)"`'
        )
    total = settings.memory_fraction * settings.vllm_per_card
    if total > 1.0 + 1e-9:
        raise ConfigError(
            f"config key 'gpuMemoryUtilization': {settings.memory_fraction}"
            f" x {settings.vllm_per_card} vLLM per card = {total:.2f} of each card's memory,"
            " more than 1"
        )
    _check_gateway_section(settings.gateway)
    names = [h.name for h in settings.hosts]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"config key 'hosts': host names repeated: {repeated}")
    if settings.gateway_host is not None and settings.gateway_host not in names:
        raise ConfigError(
            f"config key 'gatewayHost': no host named {settings.gateway_host!r} (hosts: {names})"
        )
    _check_layout(settings, names)
    _check_jobs_store(settings, names)
    if settings.recycle is not None:
        taken = sorted(set(settings.tokens) | set(settings.admin_tokens))
        if RECYCLER_TOKEN_NAME in taken:
            raise ConfigError(
                f"config key 'recycle': the token name {RECYCLER_TOKEN_NAME!r} is the "
                "recyclers' own admin token; rename the token of that name"
            )
    if settings.max_unavailable_groups is not None and settings.max_unavailable_cards is not None:
        raise ConfigError(
            "config key 'maxUnavailableGroups': set it or maxUnavailableCards, not both (waves "
            "of vLLM groups, or of whole cards)"
        )
    for key in ("simVllmLoadSeconds", "simPaddlexLoadSeconds", "simVllmFaults"):
        if getattr(settings, to_snake(key)) is not None and not any(
            h.accelerator == "sim" for h in settings.hosts
        ):
            raise ConfigError(f"config key '{key}': applies only to hosts of accelerator 'sim'")
    for index, host in enumerate(settings.hosts):
        if host.port_first_card is not None and host.port_first_card not in host.card_ids:
            key = "portFirstCard" if len(settings.hosts) == 1 else f"hosts[{index}].portFirstCard"
            raise ConfigError(
                f"config key '{key}': card {host.port_first_card} is not one of the cards "
                f"{list(host.card_ids)}"
            )


def _check_layout(settings: FleetSettings, names: list[str]) -> None:
    if settings.gateway_layout == "single":
        if settings.balancer is not None:
            raise ConfigError(
                "config key 'balancer': used only with gatewayLayout per-host (`pulumi config set "
                "gatewayLayout per-host`), or remove it"
            )
        return
    if settings.gateway_host is not None:
        raise ConfigError(
            "config key 'gatewayHost': with gatewayLayout per-host every host runs its own "
            "gateway; remove it (the balancer's host is 'balancer.host')"
        )
    host = settings.balancer_settings.host
    if host is not None and host not in names:
        raise ConfigError(f"config key 'balancer.host': no host named {host!r} (hosts: {names})")


def _check_jobs_store(settings: FleetSettings, names: list[str]) -> None:
    if settings.jobs_store == "sqlite":
        given = sorted(
            to_camel(field)
            for field in ("jobs_store_host", "jobs_store_port", "jobs_store_data_dir")
            if field in settings.model_fields_set
        )
        if given:
            raise ConfigError(
                f"config key '{given[0]}': used only with jobsStore postgres (`pulumi config set "
                "jobsStore postgres`), or remove it"
            )
        return
    if settings.jobs_store_url is not None:
        raise ConfigError(
            "config keys 'jobsStore'/'jobsStoreUrl': jobsStore postgres deploys the stack's own "
            "PostgreSQL, jobsStoreUrl points at an existing one; give one of them"
        )
    host = settings.jobs_store_host
    if host is not None and host not in names:
        raise ConfigError(f"config key 'jobsStoreHost': no host named {host!r} (hosts: {names})")


def _check_gateway_section(section: dict[str, Any]) -> None:
    """The `gateway` key holds the gateway's own config.json settings: validate them with the
    gateway's model, so a bad mode fails at `pulumi preview`, not in the container."""
    from gateway.config.settings import parse_settings
    from gateway.errors import ConfigError as GatewayConfigError

    if "upstreams" in section:
        raise ConfigError(
            "config key 'gateway.upstreams': set by the fleet from its PaddleX servers"
        )
    try:
        parse_settings({**section, "upstreams": []})
    except GatewayConfigError as exc:
        key, _, problem = str(exc).partition(": ")
        raise ConfigError(f"config key 'gateway.{key}': {problem}") from None
