"""`jobsStore: postgres` under the real Pulumi engine on a real Docker engine, in sim mode.

`test_the_stack_deploys_...`: one stack (one card), up first with the default SQLite store;
then `jobsStore: postgres`: up deploys the stack's own PostgreSQL (its image built from the
project's base image, its data in a host folder, a generated password) and replaces the gateway
(it opens its store at start) by one configured with it; a job submitted through the gateway's
job API finishes, and its row is in that PostgreSQL; the password is nowhere in the stack's
outputs or its exported state; a second preview changes nothing; destroy leaves the data
folder, and a new stack on it (a new password, set by the container at its start) serves with
the earlier job's row still there.
`test_listening_everywhere_...`: the image alone, as it runs for gateways on other hosts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.job_api import finished_job
from tests.e2e.sim_stack import sim_stack, tokens
from tests.e2e.test_fleet_on_docker import docker, png_bytes

pytestmark = pytest.mark.docker

PORTS = 28000
DB_PORT = PORTS + 432
TOKEN = "job-store-user-" + os.urandom(12).hex()
ADMIN = "job-store-admin-" + os.urandom(12).hex()
USER = {"Authorization": f"Bearer {TOKEN}"}


def psql(container: str, sql: str) -> str:
    """`sql` as the database's superuser over the container's local socket (peer auth)."""
    return docker(
        "exec", "-u", "postgres", container,
        "psql", "-X", "-At", "-p", str(DB_PORT), "-d", "fleet", "-c", sql,
    ).stdout.strip()  # fmt: skip


def test_the_stack_deploys_postgres_and_the_gateways_jobs_live_in_it(docker_engine):
    data_dir = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-postgres-"))
    store_config = {
        "jobsStore": "postgres",
        "jobsStorePort": str(DB_PORT),
        "jobsStoreDataDir": str(data_dir),
    }
    try:
        with sim_stack("job-store", PORTS, tokens(TOKEN, ADMIN)) as fleet:
            fleet.stack.up()
            before = fleet.stack.outputs()["topology"]["gateway"]["container"]
            fleet.set(**store_config)
            started = time.monotonic()
            fleet.stack.up()
            up_s = time.monotonic() - started
            gateway = fleet.stack.outputs()["topology"]["gateway"]["container"]
            assert gateway != before  # replaced: a reload would keep its SQLite store
            running = docker("ps", "--format", "{{.Names}}").stdout.split()
            assert gateway in running and before not in running
            store = fleet.plan.job_store
            assert store is not None
            outputs = fleet.stack.outputs()
            assert outputs["jobs_store"] == {
                "host": "local",
                "address": "127.0.0.1",
                "port": DB_PORT,
                "container": store.container_name,
                "database": "fleet",
                "user": "fleet",
            }
            assert (data_dir / "PG_VERSION").is_file()  # initdb ran into the host folder
            password = docker(
                "exec", store.container_name, "cat", "/etc/paddleocr-fleet/postgres.password"
            ).stdout
            assert len(password) == 64
            shown = fleet.stack.run(["stack", "output", "--json", "--stack", fleet.name])
            assert password not in shown.stdout
            history = fleet.stack.run(["stack", "export", "--stack", fleet.name]).stdout
            assert password not in history  # encrypted in the state
            # listening on loopback only (one host), with the password
            listen = psql(store.container_name, "SHOW listen_addresses")
            assert listen == "127.0.0.1"

            url = fleet.url
            finished = finished_job(url, USER, ("doc.png", png_bytes(), "image/png"), 90)
            job, page = finished.id, finished.pages[0]
            assert "sim-vllm:" in page["markdown"]["text"]

            row = psql(store.container_name, f"SELECT state FROM jobs WHERE id = '{job}'")
            assert row == "done"
            fleet.stack.preview("--expect-no-changes")
            print(f"up {up_s:.1f}s, job done in the stack's PostgreSQL")
        assert (data_dir / "PG_VERSION").is_file()  # destroy keeps the data
        with sim_stack("job-store", PORTS, tokens(TOKEN, ADMIN), **store_config) as again:
            again.stack.up()  # its gateway connects with the new stack's password
            assert psql(store.container_name, f"SELECT state FROM jobs WHERE id = '{job}'") == (
                "done"
            )
            answer = httpx.get(f"{again.url}/api/v2/ocr/jobs/{job}", headers=USER, timeout=10)
            assert answer.json()["data"]["state"] == "done"
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_listening_everywhere_only_the_fleet_role_gets_in_and_only_with_its_password(docker_engine):
    """The image as a stack with gateways on other hosts runs it (`listen_addresses '*'`): over
    TCP the role `fleet` with its password (SCRAM), nothing else; a restart with another
    password file keeps the data and takes the new password."""
    tag = f"paddleocr-fleet/postgres:test-{os.urandom(3).hex()}"
    name = f"paddleocr-fleet-job-store-image-{os.urandom(3).hex()}"
    root = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-postgres-image-"))
    (root / "data").mkdir()
    password = root / "password"
    password.write_text("first-" + os.urandom(16).hex())
    port = str(DB_PORT + 1)
    built = docker("build", "--network", "host", "-q", "-t", tag, "config/postgres")
    assert built.returncode == 0, built.stderr[-3000:]
    try:
        started = docker(
            "run", "-d", "--name", name, "--network", "host",
            "-v", f"{root / 'data'}:/var/lib/postgresql/data",
            "-v", f"{password}:/etc/paddleocr-fleet/postgres.password:ro",
            tag, port, "*",
        )  # fmt: skip
        assert started.returncode == 0, started.stderr

        def tcp(user: str, secret: str, sql: str = "SELECT current_user") -> tuple[int, str]:
            client = ["psql", "-X", "-At", "-h", "127.0.0.1", "-p", port, "-U", user, "-d", "fleet"]
            done = subprocess.run(
                ["docker", "exec", "-e", f"PGPASSWORD={secret}", name, *client, "-c", sql],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            return done.returncode, (done.stdout + done.stderr).strip()

        def ready() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                probe = ["docker", "exec", name, "pg_isready", "-q", "-h", "127.0.0.1", "-p", port]
                if subprocess.run(probe, check=False).returncode == 0:
                    return
                time.sleep(0.5)
            raise AssertionError(docker("logs", name).stderr[-2000:])

        ready()
        first = password.read_text()
        assert tcp("fleet", first) == (0, "fleet")
        assert tcp("fleet", first, "SHOW listen_addresses") == (0, "*")
        code, said = tcp("fleet", "wrong-password")
        assert code != 0 and "password authentication failed" in said
        code, said = tcp("postgres", first)  # the superuser: the local socket only
        assert code != 0 and "no pg_hba.conf entry" in said
        assert tcp("fleet", first, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")[0] == 0

        password.write_text("second-" + os.urandom(16).hex())
        docker("restart", name)
        ready()
        assert tcp("fleet", first)[0] != 0
        assert tcp("fleet", password.read_text(), "SELECT n FROM kept") == (0, "7")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
