"""`jobsStore: postgres`: the stack's own PostgreSQL under Pulumi mocks (components/jobstore.py)."""

import json

import pytest

from components import haproxy
from components.plan import build_plan
from components.settings import ConfigError, load_settings
from tests.components.test_stack import SECRET_SIG, SECRET_VALUE_SIG
from tests.pulumi_harness import COMMAND, CONTAINER, IMAGE, record_stack

POSTGRES = {"cards": "1", "jobsStore": "postgres"}
MOCK_PASSWORD = "ok"  # the mocks' stdout of every command
PER_HOST = {
    "hosts": json.dumps(
        [
            {"name": "a", "endpoint": "ssh://ops@a.example", "cards": 1},
            {"name": "b", "endpoint": "ssh://ops@b.example", "cards": 1},
        ]
    ),
    "gatewayLayout": "per-host",
    "jobsStore": "postgres",
    "jobsStoreHost": "b",
}


@pytest.fixture(scope="module")
def stack():
    return record_stack(POSTGRES)


def _unsecret(value):
    assert value[SECRET_SIG] == SECRET_VALUE_SIG, "not a secret"
    return value["value"]


def test_the_job_store_is_a_component_of_the_fleet_with_its_image_password_container_and_wait(
    stack,
):
    (component,) = [r for r in stack.resources if r.type == "paddleocr-fleet:fleet:JobStore"]
    fleet = next(r for r in stack.resources if r.type == "paddleocr-fleet:index:Fleet")
    assert component.parent == fleet.urn
    children = {r.name: r for r in stack.resources if r.parent == component.urn}
    assert set(children) == {
        "local-jobstore",
        "local-jobstore-image",
        "local-jobstore-image-cleanup",
        "local-jobstore-password",
        "local-jobstore-ready",
    }
    image = stack.named("local-jobstore-image")
    assert image.type == IMAGE
    assert image.inputs["build"]["context"] == "config/postgres"
    assert image.inputs["build"]["network"] == "host"
    container = stack.named("local-jobstore")
    assert container.type == CONTAINER
    assert container.inputs["name"] == "paddleocr-fleet-gateway-postgres"
    assert container.inputs["networkMode"] == "host"
    assert container.inputs["command"] == ["5432", "127.0.0.1"]  # one host: loopback only
    assert container.inputs["volumes"] == [
        {
            "hostPath": "/var/lib/paddleocr-fleet/test/postgres",
            "containerPath": "/var/lib/postgresql/data",
        }
    ]
    assert container.delete_before_replace
    ready = stack.named("local-jobstore-ready")
    assert ready.type == COMMAND
    assert "pg_isready" in ready.inputs["create"]
    assert "paddleocr-fleet-gateway-postgres" in ready.inputs["create"]
    assert container.urn in ready.dependencies


def test_the_password_is_made_once_unlogged_and_reaches_the_container_as_a_secret_file(stack):
    made = stack.named("local-jobstore-password")
    assert made.inputs["logging"] == "none"
    assert "/dev/urandom" in made.inputs["create"]
    assert not made.inputs.get("triggers")  # never made again
    (upload,) = _unsecret(stack.named("local-jobstore").inputs["uploads"])
    assert upload == {"file": "/etc/paddleocr-fleet/postgres.password", "content": MOCK_PASSWORD}
    assert MOCK_PASSWORD not in json.dumps(stack.outputs["jobs_store"])


def test_every_gateway_config_holds_the_store_url_as_a_secret_once_the_database_is_ready(stack):
    gateway = stack.named("local-gateway")
    (upload,) = _unsecret(gateway.inputs["uploads"])
    url = json.loads(upload["content"])["jobs"]["store_url"]
    assert url == f"postgresql://fleet:{MOCK_PASSWORD}@127.0.0.1:5432/fleet"
    assert _unsecret(stack.named("local-gateway-config").inputs["stdin"])
    assert stack.named("local-jobstore-ready").urn in gateway.dependencies


def test_the_stack_output_says_where_it_runs():
    recording = record_stack({**POSTGRES, "jobsStorePort": "28555", "jobsStoreDataDir": "/srv/pg"})
    assert recording.outputs["jobs_store"] == {
        "host": "local",
        "address": "127.0.0.1",
        "port": 28555,
        "container": "paddleocr-fleet-gateway-postgres",
        "database": "fleet",
        "user": "fleet",
    }
    container = recording.named("local-jobstore")
    assert container.inputs["command"] == ["28555", "127.0.0.1"]
    assert container.inputs["volumes"][0]["hostPath"] == "/srv/pg"


def test_with_gateways_on_other_hosts_it_listens_everywhere_and_each_gateway_gets_its_address():
    recording = record_stack(PER_HOST)
    container = recording.named("b-jobstore")
    assert container.inputs["command"] == ["5432", "*"]
    assert "::docker-b::" in container.provider  # on the chosen host's engine
    assert "b.example" in recording.named("b-jobstore-ready").inputs["environment"]["DOCKER_HOST"]
    urls = {}
    for host in "ab":
        (upload,) = _unsecret(recording.named(f"{host}-gateway").inputs["uploads"])
        urls[host] = json.loads(upload["content"])["jobs"]["store_url"]
    assert urls == {
        "a": f"postgresql://fleet:{MOCK_PASSWORD}@b.example:5432/fleet",
        "b": f"postgresql://fleet:{MOCK_PASSWORD}@127.0.0.1:5432/fleet",
    }
    settings = load_settings(PER_HOST)
    assert haproxy.haproxy_spec(settings, build_plan(settings)).shared_jobs


def test_the_default_host_is_the_first_gateways_and_sqlite_deploys_no_store():
    config = {k: v for k, v in PER_HOST.items() if k != "jobsStoreHost"}
    store = build_plan(load_settings(config)).job_store
    assert store is not None and store.host.name == "a"
    assert build_plan(load_settings({"cards": "1"})).job_store is None
    recording = record_stack({"cards": "1"})
    assert not [r for r in recording.resources if r.type == "paddleocr-fleet:fleet:JobStore"]
    assert "jobs_store" not in recording.outputs


@pytest.mark.parametrize(
    ("config", "secrets", "message"),
    [
        (
            {"jobsStore": "postgres"},
            {"jobsStoreUrl": "postgresql://u:p@db:5432/jobs"},
            "config keys 'jobsStore'/'jobsStoreUrl'",
        ),
        ({"jobsStore": "mysql"}, {}, "config key 'jobsStore': Input should be 'sqlite' or"),
        ({"jobsStore": "postgres", "jobsStoreHost": "z"}, {}, "'jobsStoreHost': no host named"),
        ({"jobsStore": "postgres", "jobsStorePort": "70000"}, {}, "'jobsStorePort': Input should"),
        ({"jobsStore": "postgres", "jobsStorePort": "x"}, {}, "'jobsStorePort': Input should"),
        ({"jobsStore": "postgres", "jobsStoreDataDir": "pg"}, {}, "'jobsStoreDataDir': must be"),
        ({"jobsStorePort": "5433"}, {}, "'jobsStorePort': used only with jobsStore postgres"),
        ({"jobsStoreHost": "local"}, {}, "'jobsStoreHost': used only with jobsStore postgres"),
    ],
)
def test_bad_job_store_settings_name_the_key(config, secrets, message):
    with pytest.raises(ConfigError) as raised:
        load_settings({"cards": "1", **config, **secrets}, set(secrets))
    assert message in str(raised.value)
    assert "p@db" not in str(raised.value)


def test_its_port_is_checked_against_the_port_plan():
    with pytest.raises(ConfigError, match="'gatewayPort/jobsStorePort': port 9101 on host 'local'"):
        build_plan(load_settings({**POSTGRES, "jobsStorePort": "9101"}))
    with pytest.raises(ConfigError, match=r"jobsStorePort.*PostgreSQL"):
        build_plan(load_settings({**POSTGRES, "jobsStorePort": "9120"}))  # a PaddleX's


def test_preflight_names_its_container_on_its_host():
    from components.preflight import planned_names

    names = planned_names(build_plan(load_settings(PER_HOST)))
    assert "paddleocr-fleet-gateway-postgres" in names["b"]
    assert "paddleocr-fleet-gateway-postgres" not in names["a"]


def test_a_gateway_whose_store_changes_is_replaced_and_one_without_a_shared_store_keeps_its_name():
    """The gateway opens its store at start (a reload does not move it): the store is part of
    the container's generation, and only when shared, so a SQLite stack's names stay as they
    were."""
    names = {}
    for store, config, secrets in (
        ("sqlite", {"cards": "1"}, {}),
        ("postgres", POSTGRES, {}),
        ("url", {"cards": "1"}, {"jobsStoreUrl": "postgresql://u:pw-pw@db.example:5433/jobs"}),
    ):
        recording = record_stack(config, secrets=secrets)
        names[store] = recording.named("local-gateway").inputs["name"]
        assert "pw-pw" not in names[store] and MOCK_PASSWORD not in names[store].split("-")
    assert len(set(names.values())) == 3


def test_the_plan_printout_names_it():
    from components.plan.cli import render_matrix

    printed = render_matrix(build_plan(load_settings(PER_HOST)))
    assert "job store paddleocr-fleet-gateway-postgres (PostgreSQL) on host b: port 5432" in printed
    assert "listening on *" in printed
