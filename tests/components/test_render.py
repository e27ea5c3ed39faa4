"""Rendered artefacts: flags, pipeline configs, and the shell commands run for real."""

import contextlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from components import plan as plan_module
from components import render
from components.plan import PaddlexInstance, build_plan, slot_ports, topology_ports
from components.render import gateway as render_gateway
from components.render import keeper as render_keeper
from components.settings import FleetSettings, load_settings
from sim.vllm.faults import FAULTS_ENV, Faults, parse_faults
from tests.ports import free_port, free_ports
from tests.waiting import wait_for

FAKE_DOCKER = Path(__file__).with_name("fake_docker.py")


@pytest.fixture
def seed():
    settings = load_settings({"portFirstCard": "2"})
    return settings, build_plan(settings)


def test_vllm_launch_has_the_seeds_flags(seed):
    settings, plan = seed
    argv = render.vllm_argv(settings, plan.card("local", 0).vllm[1])
    assert argv[:3] == ["vllm", "serve", "/data/PaddleOCR-VL-1.5-0.9B"]
    flags = " ".join(argv)
    for expected in [
        "--served-model-name PaddleOCR-VL-1.5-0.9B",
        "--port 9041",
        "--max-num-batched-tokens 16384",
        "--trust-remote-code",
        "--no-enable-prefix-caching",
        "--mm-processor-cache-gb 0",
        "--gpu-memory-utilization 0.45",
        '--compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY"}',
        '--additional_config {"enable_cpu_binding":true}',
    ]:
        assert expected in flags


def test_vllm_env_carries_the_seeds_exports_and_the_card(seed):
    settings, plan = seed
    env = render.vllm_env(settings, plan.card("local", 5).vllm[0])
    assert env == {
        "TASK_QUEUE_ENABLE": "1",
        "CPU_AFFINITY_CONF": "1",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "VLLM_USE_MODELSCOPE": "true",
        "ASCEND_RT_VISIBLE_DEVICES": "5",
    }


def test_nvidia_launch_keeps_the_shared_flags_without_the_ascend_ones():
    settings = load_settings({"cards": "1", "accelerator": "nvidia", "vllmExtraArgs": "--x 1"})
    argv = render.vllm_argv(settings, build_plan(settings).vllm[0])
    assert "--no-enable-prefix-caching" in argv and "--compilation-config" not in argv
    assert argv[-2:] == ["--x", "1"]


def test_pipeline_config_binds_to_its_vllm_and_lifts_the_page_limit(seed):
    settings, plan = seed
    for paddlex in plan.paddlex:
        config = yaml.safe_load(render.pipeline_config_yaml(settings, paddlex))
        genai = config["SubModules"]["VLRecognition"]["genai_config"]
        assert genai == {"backend": "vllm-server", "server_url": f"{paddlex.vllm.local_url}/v1"}
        assert config["Serving"] == {"visualize": False, "extra": {"max_num_input_imgs": None}}
    config = yaml.safe_load(render.pipeline_config_yaml(settings, plan.card("local", 0).paddlex[4]))
    assert config["SubModules"]["VLRecognition"]["genai_config"]["server_url"] == (
        "http://127.0.0.1:9041/v1"
    )
    assert config["batch_size"] == 128
    assert config["SubModules"]["LayoutDetection"]["batch_size"] == 32
    assert config["SubModules"]["VLRecognition"]["batch_size"] == 16384
    assert config["SubPipelines"]["DocPreprocessor"]["batch_size"] == 16


def test_batch_sizes_come_from_settings():
    settings = load_settings({"cards": "1", "pipelineBatchSize": "64", "layoutBatchSize": "8"})
    config = render.pipeline_config(settings, build_plan(settings).paddlex[0])
    assert config["batch_size"] == 64 and config["SubModules"]["LayoutDetection"]["batch_size"] == 8


def test_gateway_config_merges_defaults_operator_settings_and_upstreams(seed):
    settings = load_settings({"gateway": '{"load_balance": {"mode": "p2c"}}'})
    plan = build_plan(settings)
    upstreams = [render.gateway_upstream(p) for p in plan.paddlex[:2]]
    config = render.gateway_config(settings, upstreams)
    assert config["load_balance"] == {"mode": "p2c", "max_attempts": 12}
    assert config["http"]["timeout_s"] == 300
    assert config["upstreams"][0] == {
        "url": "http://127.0.0.1:9120",
        "host": "local",
        "card": 0,
        "vllm": "http://127.0.0.1:9025",
        "container": "paddle-9120-npu-0",
    }


def test_upstreams_name_the_gateways_keeper_and_the_keeper_lists_them(seed):
    settings, plan = seed
    keeper = plan.gateway.keeper
    assert keeper is not None
    upstreams = [render.gateway_upstream(p) for p in plan.paddlex[:2]]
    config = render.gateway_config(settings, upstreams, keeper)
    assert [u["keeper"] for u in config["upstreams"]] == ["http://127.0.0.1:9102"] * 2
    assert "keeper" not in render.gateway_config(settings, upstreams)["upstreams"][0]
    assert json.loads(render.keeper_config_json(upstreams)) == {
        "upstreams": [p.url for p in plan.paddlex[:2]]
    }
    assert render.keeper_argv(keeper)[:5] == [
        "python", "-m", "gateway.keeper", "--config", "/etc/paddleocr-fleet/keeper.json"
    ]  # fmt: skip
    topology = render.topology(settings, plan)
    assert topology["gateway"]["keeper"]["port"] == 9102
    assert topology_ports(topology) == slot_ports(plan)  # the port guard reads it back


# --- the shell strings, run for real -------------------------------------------------------


@pytest.fixture
def shell_env(tmp_path, monkeypatch):
    """PATH with a fake `docker` (and room for more fakes); returns (env, bin_dir, log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "docker", f'#!/bin/sh\nexec {sys.executable} {FAKE_DOCKER} "$@"\n')
    log = tmp_path / "docker.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DOCKER_LOG": str(log),
        "HOME": str(tmp_path),
    }
    (tmp_path / ".bashrc").write_text("export FROM_BASHRC=yes\n")
    return env, bin_dir, log


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class _Server:
    """A loopback HTTP server answering GET with a fixed body, starting after `delay` seconds."""

    def __init__(self, port: int, body: bytes, delay: float = 0.0):
        handler = type(
            "Handler",
            (BaseHTTPRequestHandler,),
            {"do_GET": _answer(body), "log_message": lambda *a: None},
        )
        self.port, self.delay, self.handler = port, delay, handler
        self.httpd: ThreadingHTTPServer | None = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        time.sleep(self.delay)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        self.httpd.serve_forever()

    def close(self):
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()


def _answer(body: bytes):
    def do_get(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    return do_get


def _settings_on(port: int, timeout: int = 20):
    """One vLLM on `port`, its PaddleX and the gateway on other free ports."""
    paddlex_port, gateway_port = [p for p in free_ports(3) if p != port][:2]
    settings = load_settings(
        {
            "cards": "1",
            "vllmPerCard": "1",
            "paddlexPerVllm": "1",
            "vllmBasePort": str(port),
            "paddlexBasePort": str(paddlex_port),
            "gatewayPort": str(gateway_port),
            "vllmReadyTimeout": str(timeout),
            "paddlexReadyTimeout": str(timeout),
            "readyPollInterval": "1",
        }
    )
    return settings, build_plan(settings)


def _sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a rendered command that ends by itself (a readiness wait, a lookup) as the stack's
    `command` provider does, through `/bin/sh -c`; its output captured as text, a minute at most.
    (A start command is not for this: the service it leaves behind holds the output pipes.)"""
    return subprocess.run(
        ["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=60
    )


def test_vllm_readiness_waits_until_the_model_is_listed(shell_env):
    env, _, _ = shell_env
    port = free_port()
    settings, plan = _settings_on(port)
    models = json.dumps({"object": "list", "data": [{"id": "PaddleOCR-VL-1.5-0.9B"}]}).encode()
    server = _Server(port, models, delay=2.0)
    try:
        started = time.monotonic()
        result = _sh(render.vllm_ready_command(settings, plan.vllm[0]), env)
        assert result.returncode == 0, result.stderr
        assert time.monotonic() - started >= 1.5
        assert f"ready at http://127.0.0.1:{port}/v1/models" in result.stdout
    finally:
        server.close()


def test_vllm_readiness_rejects_a_server_without_the_served_model(shell_env):
    env, _, _ = shell_env
    port = free_port()
    settings, plan = _settings_on(port, timeout=2)
    server = _Server(port, b'{"object":"list","data":[{"id":"other-model"}]}')
    try:
        result = _sh(render.vllm_ready_command(settings, plan.vllm[0]), env)
    finally:
        server.close()
    assert result.returncode == 1
    assert "vLLM #1 of card 0 on host local" in result.stderr
    assert "not ready at" in result.stderr and "after 2 s" in result.stderr
    assert f"docker logs vllm-ascend-paddleocr-{port}-npu-0" in result.stderr


def test_readiness_fails_fast_when_the_container_stopped(shell_env):
    env, _, _ = shell_env
    settings, plan = _settings_on(free_port(), timeout=300)
    started = time.monotonic()
    result = _sh(
        render.paddlex_ready_command(settings, plan.paddlex[0]),
        {**env, "FAKE_DOCKER_RUNNING": "false"},
    )
    assert result.returncode == 1 and time.monotonic() - started < 30
    assert "is not running" in result.stderr
    assert "tail -n 100 /data/logs/paddle-" in result.stderr


class PaddlexInContainer(NamedTuple):
    env: dict[str, str]
    docker_log: Path
    argv_file: Path
    settings: FleetSettings
    paddlex: PaddlexInstance


@pytest.fixture
def paddlex_in_container(shell_env, tmp_path, monkeypatch) -> PaddlexInContainer:
    """One PaddleX instance (of :func:`_settings_on`) whose container is this machine: its
    config and log folders point at tmp_path; a fake `paddlex` on PATH records its argv (and a
    variable from ~/.bashrc) in ``argv_file`` and serves until killed, keeping its argv as a
    real server does (the stop command recognises its service by it)."""
    env, bin_dir, log = shell_env
    monkeypatch.setattr(plan_module, "LOG_DIR_IN_CONTAINER", str(tmp_path / "logs"))
    monkeypatch.setattr(plan_module, "CONFIG_DIR_IN_CONTAINER", str(tmp_path / "etc"))
    (tmp_path / "etc").mkdir()
    argv_file = tmp_path / "paddlex.argv"
    _executable(
        bin_dir / "paddlex",
        f'#!/bin/bash\necho "$FROM_BASHRC" "$@" > {argv_file}\necho serving\n'
        f'exec {sys.executable} -c "import time; time.sleep(60)" "$@"\n',
    )
    settings, plan = _settings_on(free_port())
    return PaddlexInContainer(env, log, argv_file, settings, plan.paddlex[0])


def test_paddlex_start_and_stop_commands_run_the_service_and_end_it(
    paddlex_in_container,
):
    env, log, argv_file, settings, paddlex = paddlex_in_container
    subprocess.run(
        ["/bin/sh", "-c", render.paddlex_start_command(settings, paddlex)], env=env, check=True
    )
    pid_file, log_file = Path(render.pid_file(paddlex)), Path(paddlex.log_path)
    # `echo ... > file` creates the file before it writes to it: wait for the whole lines.
    wait_for(lambda: _line_in(argv_file) and _line_in(pid_file) and "serving" in _text(log_file))
    assert argv_file.read_text().split() == ["yes", *render.paddlex_argv(settings, paddlex)[1:]]
    pid = int(pid_file.read_text())
    os.kill(pid, 0)  # the service runs, as the pid the start command recorded
    assert "serving" in log_file.read_text()
    write, start = (json.loads(line)["argv"] for line in log.read_text().splitlines()[:2])
    # The script is written as root (a non-root image cannot fail it silently), then started.
    assert write[:5] == ["exec", "-u", "0", paddlex.container_name, "sh"]
    assert start == ["exec", "-d", paddlex.container_name, "bash", paddlex.service_script_path]
    assert Path(paddlex.service_script_path).read_text().strip() == (
        render.paddlex_service_script(settings, paddlex)
    )

    subprocess.run(["/bin/sh", "-c", render.paddlex_stop_command(paddlex)], env=env, check=True)
    wait_for(lambda: not _alive(pid))
    assert not _alive(pid) and not pid_file.exists()
    assert not Path(paddlex.service_script_path).exists()  # a restart will not bring it back
    # Stopping again, or with no container at all, is harmless.
    env_without_docker = {**env, "PATH": "/nonexistent"}
    subprocess.run(
        ["/bin/sh", "-c", render.paddlex_stop_command(paddlex)], env=env_without_docker, check=True
    )


def _servers(paddlex) -> list[int]:
    """Pids of the fake `paddlex` servers of this instance (each keeps its argv)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if (
                    b"import time; time.sleep(60)" in argv
                    and paddlex.pipeline_config_path.encode() in argv
                ):
                    found.append(int(entry.name))
    return found


def test_starting_again_or_at_once_leaves_one_service_the_pid_file_names(
    paddlex_in_container,
):
    env, _, argv_file, settings, paddlex = paddlex_in_container
    start = ["/bin/sh", "-c", render.paddlex_start_command(settings, paddlex)]
    # Three starts at once (a container restart racing `fleetctl restart`), then an update.
    for process in [subprocess.Popen(start, env=env) for _ in range(3)]:
        assert process.wait(timeout=30) == 0
    assert wait_for(lambda: _line_in(argv_file) and len(_servers(paddlex)) >= 1)
    subprocess.run(start, env=env, check=True)
    time.sleep(1.5)  # room for a second server to appear
    servers = _servers(paddlex)
    try:
        assert len(servers) == 1, f"{len(servers)} services of one instance"
        assert int(Path(render.pid_file(paddlex)).read_text()) == servers[0]
        assert "already runs as pid" in Path(paddlex.log_path).read_text()
        subprocess.run(["/bin/sh", "-c", render.paddlex_stop_command(paddlex)], env=env, check=True)
        assert wait_for(lambda: not _servers(paddlex))
    finally:
        for pid in _servers(paddlex):
            os.kill(pid, 9)


def test_a_stale_pid_file_naming_another_process_is_left_alone_by_the_stop(
    paddlex_in_container,
):
    """In a restarted container pids start again at 1: the pid file may name any process."""
    env, paddlex = paddlex_in_container.env, paddlex_in_container.paddlex
    other = subprocess.Popen(["sleep", "30"])
    try:
        Path(render.pid_file(paddlex)).write_text(f"{other.pid}\n")
        subprocess.run(["/bin/sh", "-c", render.paddlex_stop_command(paddlex)], env=env, check=True)
        assert other.poll() is None, "the stop killed a process that is not the service"
        assert not Path(render.pid_file(paddlex)).exists()
    finally:
        other.kill()
        other.wait()


def test_a_containers_start_time_is_read_and_a_missing_one_names_the_repair(shell_env):
    env, _, log = shell_env
    command = render.container_started_command("0123456789abcdef", "paddle-9120-sim-0")
    found = _sh(command, env)
    assert (found.returncode, found.stdout) == (0, "true\n")  # the fake prints its state
    argv = json.loads(log.read_text().splitlines()[-1])["argv"]
    assert argv[:3] == ["inspect", "--type", "container"] and argv[-1] == "0123456789abcdef"
    assert "{{.State.StartedAt}}" in argv[-2]
    missing = _sh(command, {**env, "FAKE_DOCKER_MISSING": "1"})
    assert missing.returncode == 1
    assert "paddle-9120-sim-0 (0123456789ab) is in the stack's state" in missing.stderr
    assert "`pulumi up --refresh` creates it again" in missing.stderr


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _line_in(path: Path) -> bool:
    """True once `path` holds at least one whole line."""
    return "\n" in _text(path)


def test_a_restarted_paddlex_container_runs_its_service_again_a_fresh_one_idles(
    paddlex_in_container,
):
    env, _, argv_file, settings, paddlex = paddlex_in_container
    idle = render.paddlex_idle_argv(paddlex)

    fresh = subprocess.Popen(idle, env=env)
    time.sleep(1.0)
    assert not argv_file.exists(), "a fresh container must wait for `docker exec`"
    fresh.terminate()
    assert fresh.wait(timeout=10) == 0  # TERM ends it at once, cleanly

    Path(paddlex.service_script_path).write_text(render.paddlex_service_script(settings, paddlex))
    restarted = subprocess.Popen(idle, env=env, start_new_session=True)
    try:
        wait_for(lambda: _line_in(argv_file))
        assert argv_file.read_text().split() == ["yes", *render.paddlex_argv(settings, paddlex)[1:]]
    finally:
        os.killpg(restarted.pid, 15)
        restarted.wait(timeout=10)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def test_gateway_config_install_swaps_the_file_atomically(shell_env, tmp_path, monkeypatch):
    env, _, _ = shell_env
    target = tmp_path / "etc" / "gateway.json"
    target.parent.mkdir()
    monkeypatch.setattr(plan_module, "CONFIG_DIR_IN_CONTAINER", str(target.parent))
    settings, plan = _settings_on(free_port())
    config = render.gateway_config_json(settings, [render.gateway_upstream(plan.paddlex[0])])
    subprocess.run(
        ["/bin/sh", "-c", render.gateway_config_install_command(plan.gateway, "gw")],
        input=config,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(target.read_text())["upstreams"][0]["url"] == plan.paddlex[0].url
    assert not target.with_name("gateway.json.tmp").exists()


def test_rendered_scripts_are_valid_shell(seed):
    settings, plan = seed
    scripts = [render.vllm_ready_command(settings, v) for v in plan.vllm]
    scripts += [render.paddlex_ready_command(settings, p) for p in plan.paddlex]
    scripts += [render.paddlex_start_command(settings, p) for p in plan.paddlex]
    scripts += [render.paddlex_stop_command(p) for p in plan.paddlex]
    scripts += [render.paddlex_service_script(settings, p) for p in plan.paddlex]
    scripts += [render.container_started_command("0123abc", v.container_name) for v in plan.vllm]
    scripts += [render.gateway_ready_command(plan.gateway, plan.gateway.container_name)]
    assert plan.gateway.keeper is not None
    scripts += [render.keeper_ready_command(plan.gateway.keeper, "keeper")]
    for script in scripts:
        subprocess.run(["/bin/sh", "-n", "-c", script], check=True)
        subprocess.run(["bash", "-n", "-c", script], check=True)


def _handing_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service: str
) -> tuple[Path, _Server, str]:
    """A handover of `service` (gateway or keeper) in progress: the old process answering on
    its port; returns the new container's serving file (not written yet), that old process and
    the readiness wait of the new one."""
    serving = tmp_path / "run" / "serving"
    monkeypatch.setattr(render_gateway, "SERVING_FILE", str(serving))
    monkeypatch.setattr(render_keeper, "SERVING_FILE", str(serving))
    _, plan = _settings_on(free_port())
    assert plan.gateway.keeper is not None
    target = plan.gateway if service == "gateway" else plan.gateway.keeper
    server = _Server(target.port, b'{"status": "ok"}')  # the old process, answering
    ready = (
        render.gateway_ready_command(plan.gateway, "new-gateway")
        if service == "gateway"
        else render.keeper_ready_command(plan.gateway.keeper, "new-keeper")
    )
    return serving, server, ready


@pytest.mark.parametrize("service", ["gateway", "keeper"])
def test_a_handed_over_service_is_ready_only_once_its_own_process_serves(
    shell_env, tmp_path, monkeypatch, service
):
    """During a handover the old process answers on the port too: the readiness wait passes
    only once the new container's serving file exists, not when the port answers."""
    env, _, _ = shell_env
    serving, server, ready = _handing_over(tmp_path, monkeypatch, service)
    try:
        waiting = subprocess.Popen(
            ["/bin/sh", "-c", ready], env=env, stdout=subprocess.PIPE, text=True
        )
        time.sleep(2.5)
        assert waiting.poll() is None, "ready while the new process did not serve yet"
        serving.parent.mkdir()
        serving.write_text('{"state": "serving"}')
        out, _ = waiting.communicate(timeout=30)
    finally:
        server.close()
    assert waiting.returncode == 0 and "ready at" in out


@pytest.mark.parametrize("service", ["gateway", "keeper"])
def test_a_handed_over_service_is_not_ready_while_its_serving_file_says_waiting(
    shell_env, tmp_path, monkeypatch, service
):
    """The new process writes ``"state": "waiting"`` while the old one holds the port and
    hands nothing over: the old process answers there, the new one serves nothing yet, so the
    readiness wait goes on until the file says ``"serving"``."""
    env, _, _ = shell_env
    serving, server, ready = _handing_over(tmp_path, monkeypatch, service)
    serving.parent.mkdir()
    try:
        for content in ('{"state": "waiting", "pid": 7}', "{not json"):
            serving.write_text(content)
            waiting = subprocess.Popen(
                ["/bin/sh", "-c", ready], env=env, stdout=subprocess.PIPE, text=True
            )
            time.sleep(1.5)  # the first probe runs at once: it would have passed by now
            assert waiting.poll() is None, f"ready on a serving file saying {content}"
            waiting.kill()
            waiting.communicate(timeout=30)
        waiting = subprocess.Popen(
            ["/bin/sh", "-c", ready], env=env, stdout=subprocess.PIPE, text=True
        )
        serving.write_text('{"state": "serving", "pid": 7, "inherited": true}')
        out, _ = waiting.communicate(timeout=30)
    finally:
        server.close()
    assert waiting.returncode == 0 and "ready at" in out


def test_jobs_store_url_is_a_secret_passed_to_every_gateway():
    url = "postgresql://fleet:s3cret-pass@10.1.2.3:5432/jobs"
    with pytest.raises(Exception, match="jobsStoreUrl': must be a secret"):
        load_settings({"jobsStoreUrl": url})
    with pytest.raises(Exception, match="jobsStoreUrl") as caught:
        load_settings({"jobsStoreUrl": "mysql://fleet:s3cret-pass@h/jobs"}, {"jobsStoreUrl"})
    assert "s3cret" not in str(caught.value)
    settings = load_settings(
        {"jobsStoreUrl": url, "gatewayLayout": "per-host"}, secret_keys={"jobsStoreUrl"}
    )
    assert "s3cret" not in repr(settings)
    plan = build_plan(settings)
    config = render.gateway_config(settings, [render.gateway_upstream(plan.paddlex[0])])
    assert config["jobs"]["store_url"] == url
    assert "store_url" not in render.gateway_config(*_no_store())["jobs"]


def _no_store():
    settings = load_settings({})
    return settings, [render.gateway_upstream(build_plan(settings).paddlex[0])]


MIXED_HOSTS = (
    '[{"name": "sim-a", "endpoint": "unix:///var/run/docker.sock", "cards": 1,'
    ' "accelerator": "sim"},'
    ' {"name": "npu-b", "endpoint": "ssh://ops@npu-b.example", "cards": 1}]'
)


def test_sim_vllm_faults_reach_the_sim_vllm_containers_only():
    faults = '{"garble": 0.25, "fail": 0.05, "slowShare": 0.5, "slowSeconds": 1.5, "seed": 9}'
    settings = load_settings({"hosts": MIXED_HOSTS, "simVllmFaults": faults})
    plan = build_plan(settings)
    sim_card, npu_card = plan.card("sim-a", 0), plan.card("npu-b", 0)
    assert render.SIM_FAULTS_ENV == FAULTS_ENV  # what the sim image reads
    for vllm in sim_card.vllm:
        rendered = render.vllm_env(settings, vllm)[render.SIM_FAULTS_ENV]
        assert parse_faults(rendered) == Faults(
            garble=0.25, fail=0.05, slow_share=0.5, slow_seconds=1.5, seed=9
        )
    for vllm in npu_card.vllm:
        assert render.SIM_FAULTS_ENV not in render.vllm_env(settings, vllm)
        assert render.SIM_FAULTS_ENV not in " ".join(render.vllm_argv(settings, vllm))
    for paddlex in (*sim_card.paddlex, *npu_card.paddlex):
        assert render.SIM_FAULTS_ENV not in render.paddlex_env(settings, paddlex)
    unset = load_settings({"hosts": MIXED_HOSTS})
    assert render.SIM_FAULTS_ENV not in render.vllm_env(unset, build_plan(unset).vllm[0])
