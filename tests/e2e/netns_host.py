"""A second Docker host on this machine: a network namespace with its own Docker engine and an
sshd, reached as `ssh://root@ADDRESS` like any remote host.

    reason = unavailable()                        # None, or why no such host can be made here
    with netns_host(images=("paddleocr-fleet/vllm-sim:latest",)) as host:
        stack.prepend_path(host.bin_dir)          # the docker CLI's `ssh` is the host's wrapper
        hosts = [..., {"name": "b", "endpoint": host.endpoint, "address": host.address}]
        host.docker("ps")                         # the docker CLI through ssh
        host.ssh_calls()                          # every ssh run, with the command that ran it

What it makes, NAME being `pofleet-` and six random hex digits:

- the network namespace NAME, with loopback and one end (NAMEn) of a veth pair whose other end
  (NAMEh) is here, on a /30 of 10.213.0.0/16 that no interface or route of this machine uses
  (its first address here, the second, ADDRESS, in the namespace); the namespace has no other
  route: it reaches nothing else;
- containerd and dockerd in the namespace (`--iptables=false --bridge=none`, so containers use
  host networking: the namespace's), socket /run/NAME.sock, data root /var/lib/NAME, exec root
  /run/NAME-exec, containerd under /run/NAME-containerd; the given images are loaded into it
  from the local engine unless it has them already;
- an sshd in the namespace listening on ADDRESS:22 only, key-only, for root, whose key in
  authorized_keys sets DOCKER_HOST to the namespace's engine;
- in /tmp/NAME: the keys, the configs, the logs, and `bin/ssh`, a wrapper that runs /usr/bin/ssh
  with this host's ssh_config (identity, known_hosts holding the host key, ControlMaster reusing
  one connection, BatchMode; any other host is refused) and logs each run with the command line
  of the process that ran it. Nothing of ~/.ssh is read or written.

Everything is removed on exit; on entry, so is what an interrupted run left: resources named
with the prefix whose owner process (recorded in /tmp/NAME/owner) is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "pofleet-"
SUBNETS = ipaddress.ip_network("10.213.0.0/16")
STATE_ROOT = Path(tempfile.gettempdir())
LOCK_FILE = Path("/run/lock/paddleocr-fleet-netns.lock")
TOOLS = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "dockerd": "docker.io",
    "containerd": "containerd",
    "docker": "docker.io",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}
"""The commands a namespace host needs, and their Debian packages."""
ENGINE_TIMEOUT = 60.0
ROUTE_TYPES = {"unicast", "local", "broadcast", "multicast", "anycast", "throw", "unreachable",
               "prohibit", "blackhole", "nat"}  # fmt: skip
WRAPPER = r"""#!/bin/sh
# ssh to the namespace host {name} (tests/e2e/netns_host.py): its own config; each run logged
# as: time, pid and command line of the process that ran it, the arguments.
caller=$(tr '\0\n\t' '   ' </proc/$PPID/cmdline 2>/dev/null)
printf '%s\t%s\t%s\t%s\n' "$(date +%s.%N)" "$PPID" "$caller" "$*" >>{log}
exec {ssh} -F {config} "$@"
"""
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class HostUnavailable(RuntimeError):
    """No namespace or no engine can be made on this machine (the message says why)."""


def unavailable() -> str | None:
    """None when a namespace host can be made here, else the reason."""
    if os.geteuid() != 0:
        return "a network namespace host needs root"
    missing = [f"{tool} ({package})" for tool, package in TOOLS.items() if not _which(tool)]
    if missing:
        return f"missing {', '.join(missing)}; scripts/test.sh installs them"
    return None


@dataclass(frozen=True)
class SshCall:
    """One run of the ssh wrapper."""

    time: float
    caller_pid: int
    caller: str
    """The command line of the process that ran ssh (the docker CLI, e.g. `docker exec ...`)."""
    args: str


@dataclass(frozen=True)
class NetnsHost:
    name: str
    address: str
    """The namespace's end of the veth pair: where the host's services listen."""
    peer_address: str
    """This machine's end of the veth pair."""
    state_dir: Path

    @property
    def endpoint(self) -> str:
        return f"ssh://root@{self.address}"

    @property
    def socket(self) -> str:
        """The engine's own socket (the sshd sessions' DOCKER_HOST)."""
        return f"unix:///run/{self.name}.sock"

    @property
    def bin_dir(self) -> Path:
        """Holds the `ssh` wrapper: put it first on PATH of whatever uses `endpoint`."""
        return self.state_dir / "bin"

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def ssh_log(self) -> Path:
        return self.state_dir / "ssh-calls.log"

    @property
    def sshd_log(self) -> Path:
        return self.state_dir / "sshd.log"

    def env(self) -> dict[str, str]:
        """Environment for `docker` CLI calls through `endpoint`."""
        path = os.environ.get("PATH", SYSTEM_PATH)
        env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_CONTEXT", "DOCKER_HOST")}
        return {**env, "PATH": f"{self.bin_dir}{os.pathsep}{path}", "DOCKER_HOST": self.endpoint}

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The docker CLI against this host, through ssh."""
        return subprocess.run(
            ["docker", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ssh_calls(self) -> list[SshCall]:
        if not self.ssh_log.exists():
            return []
        calls = []
        for line in self.ssh_log.read_text(errors="replace").splitlines():
            stamp, pid, caller, args = [*line.split("\t", 3), "", "", ""][:4]
            with contextlib.suppress(ValueError):
                calls.append(SshCall(float(stamp), int(pid), caller.strip(), args.strip()))
        return calls

    def accepted_logins(self) -> int:
        """How many ssh connections the sshd accepted (ControlMaster: few for many calls)."""
        if not self.sshd_log.exists():
            return 0
        return self.sshd_log.read_text(errors="replace").count("Accepted publickey for root")


@contextlib.contextmanager
def netns_host(images: Iterable[str] = ()) -> Iterator[NetnsHost]:
    """Make a namespace host, load `images` into its engine; remove it all on exit.

    Raises `HostUnavailable` when the namespace or the engine cannot be made here.
    """
    reason = unavailable()
    if reason:
        raise HostUnavailable(reason)
    with _locked():
        remove_stale()
        name = _new_name()
        state_dir = STATE_ROOT / name
        state_dir.mkdir(mode=0o700)
        (state_dir / "owner").write_text(_process_identity(os.getpid()))
        try:
            network = _free_subnet()
            peer, address = (str(a) for a in list(network.hosts())[:2])
            host = NetnsHost(name, address, peer, state_dir)
            _make_namespace(host, network.prefixlen)
        except BaseException:
            remove(name)
            raise
    try:
        _start_engine(host)
        _load_images(host, images)
        _start_sshd(host)
        yield host
    finally:
        remove(name)


def remove_stale() -> list[str]:
    """Remove every namespace host of an earlier run whose owner process is gone."""
    stale = [name for name in _known_names() if not _owner_alive(STATE_ROOT / name / "owner")]
    for name in stale:
        remove(name)
    return stale


def remove(name: str) -> None:
    """Remove everything of the host `name`, whatever state it is in (idempotent)."""
    state_dir = STATE_ROOT / name
    socket = Path(f"/run/{name}.sock")
    with contextlib.suppress(subprocess.TimeoutExpired):
        left = _docker_local(name, "ps", "-aq").stdout.split() if socket.is_socket() else []
        if left:
            _docker_local(name, "rm", "-f", *left)
    config = state_dir / "ssh_config"
    if config.exists():
        with contextlib.suppress(subprocess.TimeoutExpired):
            _run(["ssh", "-F", config, "-O", "exit", "netns-host"], check=False, timeout=10)
    _stop(_read_pid(state_dir / "sshd.pid"))
    _stop(_read_pid(Path(f"/run/{name}.pid")), grace=30)
    _stop(_read_pid(Path(f"/run/{name}-containerd/containerd.pid")))
    _kill_all(name)
    for child in list(_children):
        if child.poll() is not None:
            _children.remove(child)
    _run(["ip", "link", "del", f"{name}h"], check=False)
    _run(["ip", "netns", "del", name], check=False)
    for path in (
        Path(f"/var/lib/{name}"),
        Path(f"/run/{name}-exec"),
        Path(f"/run/{name}-containerd"),
        socket,
        Path(f"/run/{name}.pid"),
        state_dir,
    ):
        _remove_path(path)


def _start_engine(host: NetnsHost) -> None:
    name, state = host.name, host.state_dir
    containerd_dir = Path(f"/run/{name}-containerd")
    containerd_dir.mkdir(mode=0o711)
    containerd_socket = containerd_dir / "containerd.sock"
    # Its own containerd, in the network namespace: a system containerd (which dockerd would
    # use when there is one) would start the containers' processes outside it.
    (state / "containerd.toml").write_text(
        "\n".join(
            [
                "version = 2",
                f'root = "/var/lib/{name}/containerd"',
                f'state = "{containerd_dir}/state"',
                'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
                "[grpc]",
                f'  address = "{containerd_socket}"',
                "[ttrpc]",
                f'  address = "{containerd_socket}.ttrpc"',
                "[debug]",
                '  address = ""',
                '[plugins."io.containerd.internal.v1.opt"]',
                f'  path = "/var/lib/{name}/containerd/opt"',
                "",
            ]
        )
    )
    (state / "daemon.json").write_text("{}\n")
    dockerd = [
        "dockerd",
        "--config-file", str(state / "daemon.json"),
        "--host", host.socket,
        "--data-root", f"/var/lib/{name}",
        "--exec-root", f"/run/{name}-exec",
        "--pidfile", f"/run/{name}.pid",
        "--containerd", str(containerd_socket),
        "--iptables=false", "--ip6tables=false", "--bridge=none",
    ]  # fmt: skip
    script = (
        f"containerd --config {state}/containerd.toml >{state}/containerd.log 2>&1 &\n"
        f"echo $! > {containerd_dir}/containerd.pid\n"
        f"i=0; until [ -S {containerd_socket} ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done\n"
        f"exec {shlex.join(dockerd)} >{state}/dockerd.log 2>&1\n"
    )
    _spawn([*_inside(name), "sh", "-c", script])
    deadline = time.monotonic() + ENGINE_TIMEOUT
    while _docker_local(name, "info", "--format", "{{.ServerVersion}}").returncode != 0:
        if time.monotonic() > deadline:
            logs = "".join(_tail(state / log) for log in ("containerd.log", "dockerd.log"))
            raise HostUnavailable(
                f"the Docker engine in namespace {name} did not answer in {ENGINE_TIMEOUT:.0f} s"
                f"{logs}"
            )
        time.sleep(0.5)


def _load_images(host: NetnsHost, images: Iterable[str]) -> None:
    missing = [i for i in images if _image_id(host.name, i) != _image_id(None, i)]
    if not missing:
        return
    saved = subprocess.Popen(
        ["docker", "save", *missing], stdout=subprocess.PIPE, env=_docker_env(None)
    )
    loaded = subprocess.run(
        ["docker", "load", "-q"],
        stdin=saved.stdout,
        env=_docker_env(host.name),
        capture_output=True,
        text=True,
        check=False,
    )
    assert saved.stdout is not None
    saved.stdout.close()
    if saved.wait() != 0 or loaded.returncode != 0:
        raise RuntimeError(f"loading {missing} into {host.name} failed: {loaded.stderr[-800:]}")


def _start_sshd(host: NetnsHost) -> None:
    state = host.state_dir
    for key in ("ssh_host_ed25519_key", "id_ed25519"):
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", state / key])
    host_key = (state / "ssh_host_ed25519_key.pub").read_text().split()
    client_key = (state / "id_ed25519.pub").read_text().strip()
    (state / "authorized_keys").write_text(
        f'environment="DOCKER_HOST={host.socket}" {client_key}\n'
    )
    (state / "known_hosts").write_text(f"{host.address} {host_key[0]} {host_key[1]}\n")
    (state / "sshd_config").write_text(
        "\n".join(
            [
                f"ListenAddress {host.address}:22",
                f"HostKey {state}/ssh_host_ed25519_key",
                f"PidFile {state}/sshd.pid",
                f"AuthorizedKeysFile {state}/authorized_keys",
                "AllowUsers root",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",  # the keys live under /tmp, which is world-writable
                "PermitUserEnvironment DOCKER_HOST",
                "UseDNS no",
                "PrintMotd no",
                "X11Forwarding no",
                "AllowTcpForwarding no",
                # Pulumi runs many docker commands at once: no dropped handshakes or sessions.
                "MaxStartups 200",
                "MaxSessions 200",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    (state / "ssh_config").write_text(
        "\n".join(
            [
                f"Host {host.address} netns-host",
                f"  HostName {host.address}",
                "  User root",
                "  Port 22",
                f"  IdentityFile {state}/id_ed25519",
                "  IdentitiesOnly yes",
                "  IdentityAgent none",
                f"  UserKnownHostsFile {state}/known_hosts",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                "  BatchMode yes",
                "  ControlMaster auto",
                f"  ControlPath {state}/cm-%C",
                "  ControlPersist 60",
                "  ConnectTimeout 10",
                "  ServerAliveInterval 5",
                "  ProxyCommand none",
                "Host *",
                "  ProxyCommand /bin/false",
                "",
            ]
        )
    )
    host.bin_dir.mkdir()
    wrapper = host.bin_dir / "ssh"
    wrapper.write_text(
        WRAPPER.format(name=host.name, log=host.ssh_log, ssh=_which("ssh"), config=host.ssh_config)
    )
    wrapper.chmod(0o755)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    sshd = [*_inside(host.name), _which("sshd") or "sshd"]
    tested = _run([*sshd, "-t", "-f", state / "sshd_config"], check=False)
    if tested.returncode != 0:
        raise RuntimeError(f"sshd_config of {host.name} is invalid: {tested.stderr}")
    _spawn([*sshd, "-D", "-f", state / "sshd_config", "-E", host.sshd_log])
    deadline = time.monotonic() + 30
    while True:
        answered = host.docker("version", "--format", "{{.Server.Version}}", timeout=30)
        if answered.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"docker through {host.endpoint} does not answer: {answered.stderr[-800:]}"
                f"{_tail(host.sshd_log)}"
            )
        time.sleep(0.3)


def _make_namespace(host: NetnsHost, prefixlen: int) -> None:
    name = host.name
    made = _run(["ip", "netns", "add", name], check=False)
    if made.returncode != 0:
        raise HostUnavailable(f"cannot create a network namespace: {made.stderr.strip()}")
    _run(["ip", "link", "add", f"{name}h", "type", "veth", "peer", "name", f"{name}n"])
    _run(["ip", "link", "set", f"{name}n", "netns", name])
    _run(["ip", "addr", "add", f"{host.peer_address}/{prefixlen}", "dev", f"{name}h"])
    _run(["ip", "link", "set", f"{name}h", "up"])
    inside = ["ip", "-n", name]
    _run([*inside, "addr", "add", f"{host.address}/{prefixlen}", "dev", f"{name}n"])
    _run([*inside, "link", "set", f"{name}n", "up"])
    _run([*inside, "link", "set", "lo", "up"])


def _inside(name: str) -> list[str]:
    """Run in the namespace's network only. Not `ip netns exec`: its fresh /sys has no cgroup
    mounts, without which dockerd does not start."""
    return ["nsenter", f"--net=/run/netns/{name}", "--"]


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 of 10.213.0.0/16 that overlaps no address or route of this machine."""
    used: list[ipaddress.IPv4Network] = []
    for line in _run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        match = re.search(r"\binet (\S+)", line)
        if match:
            used.append(ipaddress.ip_interface(match.group(1)).network)
    for line in _run(["ip", "-4", "route", "show", "table", "all"]).stdout.splitlines():
        words = line.split()
        if not words:
            continue
        target = words[1] if words[0] in ROUTE_TYPES else words[0]
        if re.fullmatch(r"[0-9.]+(/\d+)?", target) and target != "0.0.0.0/0":
            used.append(ipaddress.ip_network(target, strict=False))
    candidates = list(SUBNETS.subnets(new_prefix=30))
    start = secrets.randbelow(len(candidates))
    for network in candidates[start:] + candidates[:start]:
        if not any(network.overlaps(other) for other in used):
            return network
    raise HostUnavailable(f"no free /30 in {SUBNETS} on this machine")


def _new_name() -> str:
    existing = set(_known_names())
    while True:
        name = PREFIX + secrets.token_hex(3)
        if name not in existing:
            return name


def _known_names() -> list[str]:
    """Names of the namespace hosts anything of is left on this machine."""
    pattern = re.compile(re.escape(PREFIX) + r"[0-9a-f]{6}")
    found: set[str] = set()
    netns = _run(["ip", "netns", "list"], check=False).stdout
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    found.update(pattern.findall(netns), pattern.findall(links))
    for folder in (STATE_ROOT, Path("/run"), Path("/var/lib")):
        with contextlib.suppress(OSError):
            found.update(m.group(0) for p in folder.iterdir() if (m := pattern.match(p.name)))
    return sorted(found)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serialises stale clean-up, naming and subnet choice among concurrent test runs."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _process_identity(pid: int) -> str:
    """`PID STARTTIME`, so a recycled pid is not taken for the owner."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return f"{pid} {stat.rsplit(')', 1)[1].split()[19]}"


def _owner_alive(owner: Path) -> bool:
    try:
        recorded = owner.read_text().strip()
        return _process_identity(int(recorded.split()[0])) == recorded
    except (OSError, ValueError, IndexError):
        return False


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop(pid: int | None, grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    if pid is None or not _running(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie (our own children are reaped by `_spawn`'s reaper thread)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_all(name: str) -> None:
    """SIGKILL what is left: every process in the namespace, and every process whose command
    line names the host (an ssh ControlMaster, the sshd or the engine of a namespace gone)."""
    for _ in range(50):
        pids = set(_run(["ip", "netns", "pids", name], check=False).stdout.split())
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and int(proc.name) != os.getpid():
                with contextlib.suppress(OSError):
                    if name.encode() in (proc / "cmdline").read_bytes():
                        pids.add(proc.name)
        pids = {p for p in pids if _running(int(p))}
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.1)


def _remove_path(path: Path) -> None:
    for mount in reversed(_mounts_under(path)):
        _run(["umount", "-l", mount], check=False)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _mounts_under(path: Path) -> list[str]:
    prefix = f"{path}/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(path) or point.startswith(prefix):
            mounts.append(point)
    return mounts


def _image_id(name: str | None, image: str) -> str:
    found = _docker_local(name, "image", "inspect", "-f", "{{.Id}}", image)
    return found.stdout.strip() if found.returncode == 0 else ""


def _docker_local(name: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """The docker CLI against this machine's engine (None) or the host's engine socket."""
    return _run(["docker", *args], check=False, env=_docker_env(name), timeout=120)


def _docker_env(name: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_CONTEXT", "DOCKER_HOST")}
    if name is not None:
        env["DOCKER_HOST"] = f"unix:///run/{name}.sock"
    return env


def _run(
    argv: list[object], check: bool = True, timeout: float = 60, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"`{shlex.join(done.args)}` exited {done.returncode}: {done.stderr}")
    return done


def _spawn(argv: list[object]) -> None:
    """Start a long-running daemon, detached from the test's terminal and process group."""
    process = subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _children.append(process)


_children: list[subprocess.Popen[bytes]] = []


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"\n--- last lines of {path}:\n" + "\n".join(text)


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=f"{os.environ.get('PATH', '')}{os.pathsep}{SYSTEM_PATH}")
