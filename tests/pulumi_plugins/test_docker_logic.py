"""The `docker` provider's decisions as plain functions (no engine, no CLI): Check's defaults and
failures, Diff's replace-or-update, the create body, Read's state, the context digest and
.dockerignore rules, Go durations, and which endpoint the configuration selects."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from pulumi_plugins import command
from pulumi_plugins.docker import VERSION, config, container, godur, image, props, remote_image
from pulumi_plugins.docker.container_schema import create_body
from pulumi_plugins.docker.container_state import state_from_inspect
from pulumi_plugins.docker.context_digest import Matcher, context_digest, go_mode, read_ignore_file
from pulumi_plugins.rpc import SECRET_SIG, SIG_KEY, UNKNOWN

REPO = Path(__file__).resolve().parents[2]

BASE = "paddleocr-fleet/base:bookworm"
IMAGE_ID = "sha256:" + "ab" * 32


def checked(**news: Any) -> dict[str, Any]:
    inputs, failures = container.check({"image": BASE, **news}, None, "web", b"seed", proposed=None)
    assert failures == []
    return inputs


def inspect_of(inputs: dict[str, Any], running: bool = True) -> dict[str, Any]:
    """What the daemon reports for a container created from `create_body(inputs)`."""
    body = create_body(inputs)
    host = body.pop("HostConfig")
    config_ = {k: v for k, v in body.items() if k != "NetworkingConfig"}
    config_.setdefault("Cmd", None)
    config_.setdefault("Entrypoint", None)
    host.setdefault("ShmSize", 64 * 1024 * 1024)
    host["LogConfig"] = {"Type": "json-file", "Config": {}}
    host.setdefault("IpcMode", "private")
    return {
        "Id": "c" * 64,
        "Name": "/" + inputs["name"],
        "Image": IMAGE_ID,
        "Platform": "linux",
        "State": {"Running": running, "ExitCode": 0 if running else 137},
        "Config": {**config_, "Hostname": "vm"},
        "HostConfig": {**host, "Runtime": "runc"},
        "NetworkSettings": {"Bridge": "", "Networks": {"host": {"IPAddress": ""}}},
    }


# ---------------------------------------------------------------------------------------------
# Container: Check


def test_check_fills_the_bridges_non_falsy_defaults_and_an_autoname() -> None:
    inputs = checked()
    assert inputs["name"] == container.autoname("web", b"seed")
    assert inputs["name"].startswith("web-") and len(inputs["name"]) == len("web-") + 7
    expected = {
        "mustRun": True,
        "start": True,
        "restart": "no",
        "networkMode": "bridge",
        "removeVolumes": True,
        "waitTimeout": 60,
        "containerReadRefreshTimeoutMilliseconds": 15000,
    }
    assert {k: inputs[k] for k in expected} == expected
    assert "rm" not in inputs and "attach" not in inputs, "falsy defaults stay unset"
    assert inputs[props.DEFAULTS_KEY] == sorted([*expected, "name"])


def test_check_keeps_an_earlier_autoname_and_an_explicit_name() -> None:
    first = checked()
    again, _ = container.check({"image": BASE}, first, "web", b"other seed", proposed=None)
    assert again["name"] == first["name"]
    named, _ = container.check({"image": BASE, "name": "mine"}, first, "web", b"", None)
    assert named["name"] == "mine" and "name" not in named[props.DEFAULTS_KEY]


def test_check_defaults_nested_blocks() -> None:
    inputs = checked(
        devices=[{"hostPath": "/dev/fuse"}],
        deviceRequests=[{"driver": "nvidia", "deviceIds": ["0"], "capabilities": ["gpu"]}],
    )
    assert inputs["devices"] == [
        {"hostPath": "/dev/fuse", "permissions": "rwm", "__defaults": ["permissions"]}
    ]
    assert inputs["deviceRequests"][0]["driver"] == "nvidia"
    assert inputs["deviceRequests"][0]["__defaults"] == []
    assert "count" not in inputs["deviceRequests"][0], "count defaults to 0: falsy, unset"
    assert checked(deviceRequests=[{}])["deviceRequests"] == [
        {"driver": "cdi", "__defaults": ["driver"]}
    ]


@pytest.mark.parametrize(
    ("news", "where", "reason"),
    [
        (
            {"volumes": [{"hostPath": "models", "containerPath": "/m"}]},
            "volumes[0].hostPath",
            "'models' must be an absolute path",
        ),
        ({"restart": "sometimes"}, "restart", "doesn't match the pattern"),
        ({"shmSize": -1}, "shmSize", "cannot be lower than 0"),
        ({"uploads": [{"file": "/a"}]}, "uploads[0]", "exactly one of 'content'"),
        (
            {"uploads": [{"file": "/a", "content": "x", "source": "/b"}]},
            "uploads[0]",
            "got content, source",
        ),
        (
            {"uploads": [{"file": "/a", "content": "x", "permissions": "755"}]},
            "uploads[0].permissions",
            "doesn't match the pattern '^0[0-7]{3}$'",
        ),
        ({"command": ["run", ""]}, "command", "values for command may not be empty"),
        ({"ports": [{"internal": 80}]}, "ports", "'ports' is not implemented by this provider"),
        (
            {"uploads": [{"file": "/a", "content": "x", "owner": "root"}]},
            "uploads[0].owner",
            "not implemented",
        ),
    ],
)
def test_check_failures_name_the_property(news: dict[str, Any], where: str, reason: str) -> None:
    _, failures = container.check({"image": BASE, **news}, None, "web", b"", None)
    assert [f.property for f in failures] == [where]
    assert reason in failures[0].reason and where in failures[0].reason


def test_check_requires_an_image_and_judges_no_unknown() -> None:
    _, failures = container.check({}, None, "web", b"", None)
    assert [(f.property, f.reason) for f in failures] == [
        ("image", "Missing required property 'image'")
    ]
    _, failures = container.check(
        {"image": UNKNOWN, "volumes": [{"hostPath": UNKNOWN, "containerPath": "/m"}]},
        None,
        "web",
        b"",
        None,
    )
    assert failures == []


# ---------------------------------------------------------------------------------------------
# Container: Diff against the state a Read produces


def test_a_created_container_has_no_diff() -> None:
    inputs = checked(
        name="vllm-0",
        networkMode="host",
        restart="unless-stopped",
        entrypoints=["bash", "-c", "sleep infinity"],
        command=["--port", "8000"],
        envs=["B=2", "A=1"],
        labels=[{"label": "role", "value": "vllm"}, {"label": "card", "value": "0"}],
        uploads=[{"file": "/etc/x.yaml", "content": "a: 1\n"}],
        privileged=True,
        devices=[{"hostPath": "/dev/davinci0", "containerPath": "/dev/davinci0"}],
        volumes=[{"hostPath": "/models", "containerPath": "/models", "readOnly": True}],
        deviceRequests=[{"driver": "nvidia", "deviceIds": ["0"], "capabilities": ["gpu"]}],
        shmSize=8192,
        image=BASE,
    )
    state = state_from_inspect(inspect_of(inputs), inputs)
    result = container.diff(state, inputs, ignore=[])
    assert not result.changed, result.detailed
    reordered = {**inputs, "envs": ["A=1", "B=2"], "labels": list(reversed(inputs["labels"]))}
    assert not container.diff(state, reordered, ignore=[]).changed, "sets ignore order"


def test_force_new_changes_replace_and_others_update() -> None:
    inputs = checked(envs=["A=1"], restart="always", entrypoints=["sleep", "1"])
    state = state_from_inspect(inspect_of(inputs), inputs)
    env = container.diff(state, {**inputs, "envs": ["A=2"]}, ignore=[])
    assert (env.replaces, env.detailed) == (["envs"], {"envs": "UPDATE_REPLACE"})
    assert "image" in env.stables and "envs" not in env.stables
    restart = container.diff(state, {**inputs, "restart": "unless-stopped"}, ignore=[])
    assert (restart.replaces, restart.updates) == ([], ["restart"])
    grace = container.diff(state, {**inputs, "destroyGraceSeconds": 30}, ignore=[])
    assert grace.detailed == {"destroyGraceSeconds": "ADD"}
    unknown = container.diff(state, {**inputs, "image": UNKNOWN}, ignore=[])
    assert unknown.detailed == {"image": "UPDATE_REPLACE"}


def test_upload_content_replaces_unless_ignored() -> None:
    inputs = checked(uploads=[{"file": "/etc/g.json", "content": "{}"}])
    state = state_from_inspect(inspect_of(inputs), inputs)
    news = {**inputs, "uploads": [{"file": "/etc/g.json", "content": '{"a": 1}'}]}
    assert container.diff(state, news, ignore=[]).replaces == ["uploads"]
    assert not container.diff(state, news, ignore=["uploads"]).changed


def test_unset_computed_and_suppressed_values_keep_the_state() -> None:
    inputs = checked()
    info = inspect_of(inputs)
    info["Config"].update(Env=["PATH=/usr/bin"], Cmd=["python"], WorkingDir="/opt", User="app")
    state = state_from_inspect(info, inputs)
    assert state["command"] == ["python"] and state["workingDir"] == "/opt"
    assert not container.diff(state, inputs, ignore=[]).changed
    removed = {k: v for k, v in checked(envs=["A=1"]).items() if k != "envs"}
    assert not container.diff({**state, "envs": ["A=1"]}, removed, ignore=[]).changed
    with_volume = {**state, "volumes": [{"hostPath": "/a", "containerPath": "/a"}]}
    assert container.diff(with_volume, inputs, ignore=[]).detailed == {"volumes": "DELETE_REPLACE"}


def test_image_compares_as_given_name_or_id() -> None:
    by_name = checked(image=BASE)
    assert state_from_inspect(inspect_of(by_name), by_name)["image"] == BASE
    by_id = checked(image=IMAGE_ID)
    assert state_from_inspect(inspect_of(by_id), by_id)["image"] == IMAGE_ID


def test_a_stopped_container_reads_as_must_run_false() -> None:
    inputs = checked()
    state = state_from_inspect(inspect_of(inputs, running=False), inputs)
    assert state["mustRun"] is False and state["exitCode"] == 137
    result = container.diff(state, inputs, ignore=[])
    assert result.detailed == {"mustRun": "UPDATE"} and not result.replaces


# ---------------------------------------------------------------------------------------------
# Container: the create body and the uploads


def test_create_body_matches_the_terraform_provider() -> None:
    body = create_body(
        checked(
            name="px",
            networkMode="host",
            restart="on-failure",
            maxRetryCount=3,
            entrypoints=["bash", "-c", "tail -f /dev/null"],
            envs=["A=1"],
            labels=[{"label": "role", "value": "paddlex"}],
            volumes=[
                {"hostPath": "/models", "containerPath": "/models"},
                {"hostPath": "/etc/cfg", "containerPath": "/cfg", "readOnly": True},
                {"fromContainer": "data"},
            ],
            devices=[{"hostPath": "/dev/davinci0"}],
            deviceRequests=[{"driver": "nvidia", "deviceIds": ["0"], "capabilities": ["gpu"]}],
            shmSize=1024,
            healthcheck={"tests": ["CMD", "true"], "interval": "1m30s", "retries": 2},
        )
    )
    host = body["HostConfig"]
    assert body["Entrypoint"] == ["bash", "-c", "tail -f /dev/null"] and "Cmd" not in body
    assert body["Labels"] == {"role": "paddlex"} and body["Env"] == ["A=1"]
    assert body["Volumes"] == {"/models": {}, "/cfg": {}}
    assert host["Binds"] == ["/models:/models:rw", "/etc/cfg:/cfg:ro"]
    assert host["VolumesFrom"] == ["data"]
    assert host["Devices"] == [
        {
            "PathOnHost": "/dev/davinci0",
            "PathInContainer": "/dev/davinci0",
            "CgroupPermissions": "rwm",
        }
    ]
    assert host["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 0, "DeviceIDs": ["0"], "Capabilities": [["gpu"]]}
    ]
    assert host["ShmSize"] == 1024 * 1024 * 1024 and host["NetworkMode"] == "host"
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert host["Init"] is False and host["AutoRemove"] is False
    assert body["Healthcheck"]["Interval"] == 90 * 10**9 and body["Healthcheck"]["Retries"] == 2


def test_volume_entries_need_a_target() -> None:
    with pytest.raises(ValueError, match="without container path"):
        create_body(checked(volumes=[{"hostPath": "/a"}]))


@pytest.mark.parametrize(
    ("upload", "mode"),
    [({}, 0o644), ({"executable": True}, 0o744), ({"permissions": "0600"}, 0o600)],
)
def test_upload_tar_holds_one_file_at_its_path(upload: dict[str, Any], mode: int) -> None:
    data = container.upload_tar({"file": "/etc/app/conf.yaml", "content": "a: 1\n", **upload})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (member,) = tar.getmembers()
        assert member.name == "/etc/app/conf.yaml" and member.mode == mode
        assert member.uid == 0 and tar.extractfile(member).read() == b"a: 1\n"


# ---------------------------------------------------------------------------------------------
# Image: Check, Diff, the context digest


@pytest.fixture
def context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (app / "Dockerfile").write_text("FROM scratch\nCOPY src /src\n")
    (app / "src" / "main.py").write_text("print('hi')\n")
    return app


def test_image_check_fills_build_defaults(context: Path) -> None:
    inputs, failures = image.check(
        {"imageName": "app:1", "skipPush": True, "build": {"context": "app"}}, None
    )
    assert failures == []
    build = inputs["build"]
    assert build["dockerfile"] == "app/Dockerfile" and build["context"] == "app"
    assert build["platform"] == image.host_platform_name()
    assert build["contextDigest"] == context_digest("app", "app/Dockerfile")
    assert inputs["buildOnPreview"] is False


def test_image_check_explains_a_misplaced_dockerfile(context: Path) -> None:
    news = {
        "imageName": "app:1",
        "skipPush": True,
        "build": {"context": "app", "dockerfile": "Dockerfile"},
    }
    _, failures = image.check(news, None)
    assert [f.property for f in failures] == ["build.dockerfile"]
    assert "Try setting `dockerfile` to 'app/Dockerfile'" in failures[0].reason


def test_image_pushing_needs_a_fully_qualified_name(context: Path) -> None:
    build = {"context": "app"}
    _, failures = image.check({"imageName": "paddleocr-fleet/gateway:latest", "build": build}, None)
    assert failures and "repository name must be canonical" in failures[0].reason
    for name in ("docker.io/team/app:1", "localhost:5000/app", "ghcr.io/team/app"):
        assert image.check({"imageName": name, "build": build}, None)[1] == []


def test_image_diff_is_an_update_of_what_changed(context: Path) -> None:
    news = {
        "imageName": "app:1",
        "skipPush": True,
        "build": {"context": "app"},
        "registry": {"server": "r.io", "username": "u", "password": "p"},
    }
    inputs, _ = image.check(news, None)
    state = {"repoDigest": IMAGE_ID, image.INPUTS_KEY: {SIG_KEY: SECRET_SIG, "value": inputs}}
    assert image.diff(state, inputs) == {}
    new_creds = {**inputs, "registry": {"server": "r.io", "username": "v", "password": "q"}}
    assert image.diff(state, new_creds) == {}, "credentials alone never rebuild"
    (context / "src" / "main.py").write_text("print('bye')\n")
    rebuilt, _ = image.check(news, None)
    assert image.diff(state, rebuilt) == {"build": "UPDATE"}


def test_context_digest_follows_what_the_build_sees(context: Path) -> None:
    def digest() -> str:
        return context_digest("app", "app/Dockerfile")

    start = digest()
    (context / ".dockerignore").write_text(".dockerignore\nnotes/\n*.log\n")
    assert digest() == start
    (context / "notes").mkdir()
    (context / "notes" / "todo.txt").write_text("x")
    (context / "debug.log").write_text("x")
    assert digest() == start, "ignored files do not count"
    (context / "src" / "main.py").chmod(0o755)
    assert digest() != start, "a mode change counts"
    (context / "src" / "main.py").chmod(0o644)
    (context / "src" / "main.py").rename(context / "src" / "app.py")
    assert digest() != start, "a rename counts"
    (context / "src" / "app.py").rename(context / "src" / "main.py")
    assert digest() == start
    (context / "Dockerfile").write_text("FROM scratch\n")
    assert digest() != start, "the Dockerfile counts"


def test_dockerfile_outside_the_context_counts_by_content_only(context: Path) -> None:
    Path("one.Dockerfile").write_text("FROM scratch\n")
    Path("two.Dockerfile").write_text("FROM scratch\n")
    assert context_digest("app", "one.Dockerfile") == context_digest("app", "two.Dockerfile")


def test_dockerfile_dockerignore_takes_precedence(context: Path) -> None:
    def digest() -> str:
        return context_digest("app", "app/Dockerfile")

    Path("app/Dockerfile.dockerignore").write_text("src\n")
    (context / ".dockerignore").write_text("nothing-here\n")
    start = digest()
    (context / "src" / "main.py").write_text("changed\n")
    assert digest() == start, "<Dockerfile>.dockerignore wins over .dockerignore"
    os.remove("app/Dockerfile.dockerignore")
    start = digest()
    (context / "src" / "main.py").write_text("changed again\n")
    assert digest() != start


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        (["*"], "a/b.txt", True),
        (["*", "!top"], "top/sub/app.js", False),
        (["*", "!projects/*/src"], "projects/foo/src/app.js", False),
        (["*", "!projects/*/src"], "projects/foo/dist/app.js", True),
        (["**/*.pyc"], "pkg/mod/x.pyc", True),
        (["**/*.pyc"], "x.pyc", True),
        (["build"], "build/out/a", True),
        (["build"], "src/build", False),
        (["*.md", "!README.md"], "README.md", False),
        (["doc?"], "docs/x", True),
        (["[a-c].txt"], "b.txt", True),
        (["/abs"], "abs/x", True),
    ],
)
def test_dockerignore_patterns(patterns: list[str], path: str, excluded: bool) -> None:
    assert Matcher(read_ignore_file("\n".join(patterns))).excluded(path) is excluded


def test_ignore_file_syntax() -> None:
    text = "\ufeff# comment\n\n  ./dist/  \n! keep.txt\n/root\n"
    assert read_ignore_file(text) == ["dist", "!keep.txt", "root"]


def test_go_file_modes() -> None:
    assert go_mode(0o100644) == "-rw-r--r--"
    assert go_mode(0o100755) == "-rwxr-xr-x"
    assert go_mode(0o120777) == "Lrwxrwxrwx"
    assert go_mode(0o040755) == "drwxr-xr-x"


def test_symlinks_count_by_target(context: Path) -> None:
    (context / "src" / "link").symlink_to("main.py")
    start = context_digest("app", "app/Dockerfile")
    (context / "src" / "main.py").write_text("other\n")
    (context / "src" / "other.py").write_text("x")
    assert context_digest("app", "app/Dockerfile") != start
    os.remove(context / "src" / "link")
    (context / "src" / "link").symlink_to("other.py")
    assert context_digest("app", "app/Dockerfile") != start


# ---------------------------------------------------------------------------------------------
# RemoteImage, durations, configuration


def test_remote_image_schema() -> None:
    inputs, failures = remote_image.check({"name": "busybox:1.36", "keepLocally": True}, None)
    assert failures == [] and "platform" not in inputs, "platform's default '' is falsy"
    result = remote_image.diff(
        {**inputs, "imageId": IMAGE_ID}, {**inputs, "keepLocally": False}, []
    )
    assert result.updates == ["keepLocally"] and not result.replaces
    assert remote_image.diff(inputs, {**inputs, "platform": "linux/arm64"}, []).replaces == [
        "platform"
    ]
    _, failures = remote_image.check({"name": "x", "build": {"context": "."}}, None)
    assert [f.property for f in failures] == ["build"]


def test_remote_image_repo_digest_choice() -> None:
    digests = ["reg.io/app@sha256:1", "app@sha256:2"]
    assert remote_image.repo_digest("app:1", {"RepoDigests": digests}) == "app@sha256:2"
    assert remote_image.repo_digest("app:1", {"RepoDigests": digests[:1]}) == digests[0]
    assert remote_image.repo_digest("app:1", {"RepoDigests": []}) == ""


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0s", 0),
        ("0", 0),
        ("10s", 10**10),
        ("1m30s", 9 * 10**10),
        ("500ms", 5 * 10**8),
        ("1h0m0s", 3600 * 10**9),
        ("1.5s", 15 * 10**8),
        ("2us", 2000),
    ],
)
def test_go_durations(text: str, ns: int) -> None:
    assert godur.parse(text) == ns
    assert godur.parse(godur.format(ns)) == ns
    with pytest.raises(ValueError):
        godur.parse("ten seconds")


def test_go_duration_formatting() -> None:
    assert [godur.format(n) for n in (0, 90 * 10**9, 3600 * 10**9, 5 * 10**8, 1500)] == [
        "0s",
        "1m30s",
        "1h0m0s",
        "500ms",
        "1.5µs",
    ]


def _context_home(tmp_path: Path, name: str, host: str) -> str:
    meta = tmp_path / ".docker" / "contexts" / "meta" / "abc"
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(
        json.dumps({"Name": name, "Endpoints": {"docker": {"Host": host}}})
    )
    return str(tmp_path)


def test_endpoint_precedence(tmp_path: Path) -> None:
    home = _context_home(tmp_path, "remote", "ssh://ops@gpu-1")

    def resolved(inputs: dict[str, Any], environ: dict[str, str]) -> config.ProviderConfig:
        cfg = config.ProviderConfig.from_inputs(inputs, environ)
        cfg.home = home
        return cfg

    explicit = resolved({"host": "tcp://a:2375"}, {"DOCKER_HOST": "unix:///x"})
    assert explicit.endpoint(bridged=True) == explicit.endpoint(bridged=False) == "tcp://a:2375"
    assert resolved({}, {"DOCKER_HOST": "unix:///x"}).endpoint(bridged=True) == "unix:///x"
    assert resolved({}, {}).endpoint(bridged=False) == config.LOCAL_SOCKET
    with_context = resolved({"host": "tcp://a:2375"}, {"DOCKER_CONTEXT": "remote"})
    assert with_context.endpoint(bridged=True) == "ssh://ops@gpu-1", "the context overrides host"
    assert with_context.endpoint(bridged=False) == "tcp://a:2375", "Image ignores contexts"
    assert "overrides host=tcp://a:2375" in (with_context.context_overrides_host() or "")
    named = resolved({"host": "tcp://a:2375", "context": "remote"}, {})
    assert named.endpoint(bridged=True) == "ssh://ops@gpu-1"


def test_context_lookup(tmp_path: Path) -> None:
    home = _context_home(tmp_path, "remote", "ssh://ops@gpu-1")
    assert config.context_host("remote", home) == "ssh://ops@gpu-1"
    with pytest.raises(config.ConfigError, match="context 'other' not found"):
        config.context_host("other", home)


def test_cli_env_pins_the_endpoint(tmp_path: Path) -> None:
    cfg = config.ProviderConfig.from_inputs(
        {"host": "ssh://ops@gpu-1", "sshOpts": '["-o", "StrictHostKeyChecking=no"]'},
        {"DOCKER_CONTEXT": "x", "DOCKER_HOST": "unix:///y", "PATH": os.environ["PATH"]},
    )
    env = cfg.cli_env("ssh://ops@gpu-1", tmp_path)
    assert env["DOCKER_HOST"] == "ssh://ops@gpu-1" and "DOCKER_CONTEXT" not in env
    ssh = Path(env["PATH"].split(":")[0]) / "ssh"
    assert '-o StrictHostKeyChecking=no "$@"' in ssh.read_text()
    assert cfg.ssh_opts == ["-o", "StrictHostKeyChecking=no"]
    assert config.ProviderConfig.from_inputs({}, {"DOCKER_SSH_OPTS": "-p 2222"}).ssh_opts == [
        "-p",
        "2222",
    ]


def test_check_config_failures() -> None:
    assert config.check_config({"host": "ssh://a", "version": "5.1.0"}) == []
    failures = config.check_config({"host": "gpu-1:2375", "registryAuth": "[]", "sshOpts": "x"})
    assert [f.property for f in failures] == ["registryAuth", "host", "sshOpts"]


def test_the_plugins_announce_the_versions_pyproject_pins() -> None:
    """The program asks for the provider its Python SDK names (pyproject.toml's pin), and
    install-pulumi.sh installs our plugin under that version: what the plugin says it is must
    be the same, or its behaviour is claimed for a release it was not read from."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(d.split("==", 1) for d in deps if "==" in d)
    assert pins["pulumi-docker"] == VERSION
    assert pins["pulumi-command"] == command.PLUGIN_VERSION


def test_a_build_without_buildx_says_so_as_progress_not_as_a_warning(tmp_path):
    from pulumi_plugins.docker import image
    from pulumi_plugins.docker.ops import Op

    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    logged: list[tuple[str, str, bool]] = []

    class Engine:
        def buildkit(self) -> bool:
            return False

        def run(self, args, on_line, timeout, env):
            assert env == {"DOCKER_BUILDKIT": "0"} and "--load" not in args
            Path(args[args.index("--iidfile") + 1]).write_text("sha256:abc")

        def inspect_image(self, ref):
            return {"Id": ref}

    op = Op(Engine(), "urn", False, 60, lambda *entry: logged.append(entry))  # type: ignore[arg-type]
    assert image._docker_build(op, "x:1", {}, str(tmp_path), str(tmp_path / "Dockerfile")) == (
        "sha256:abc"
    )
    assert [entry for entry in logged if entry[0] == "warning"] == []
    assert any("building with BuilderV1" in message for _, message, _ in logged)
