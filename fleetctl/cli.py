"""``fleetctl``: operate the paddleocr-fleet and feed it documents.

    fleetctl status [--json]            every instance: container, health, gateway view
    fleetctl top [--once]               live view of the gateway's status page (admin token)
    fleetctl ports                      planned ports: listening / free / taken
    fleetctl verify                     end-to-end check of each instance on its own
    fleetctl restart vllm|paddlex PORT  restart one instance (PaddleX: re-run its start command)
    fleetctl logs vllm|paddlex PORT [-n N] [-f] [--file]
    fleetctl npu                        npu-smi info / nvidia-smi per host
    fleetctl start-all                  start stopped containers and PaddleX services
    fleetctl drain URL|PORT...|--card N give PaddleX instances no new work (gateway admin API)
    fleetctl undrain URL|PORT...|--card N take them back in
    fleetctl recycle PORT|--card N      restart PaddleX card by card: drain, restart, undrain
    fleetctl ocr INPUT... --out DIR     batch OCR through the gateway

Topology: ``--outputs FILE`` (saved ``pulumi stack output --json``), else ``FLEETCTL_OUTPUTS``,
else ``pulumi stack output --json``. Gateway tokens: ``--token`` (else ``PADDLEOCR_FLEET_TOKEN``)
for OCR, ``--admin-token`` (else ``PADDLEOCR_FLEET_ADMIN_TOKEN``) for ``/upstreams``; each falls
back to the other. Exit codes: 0 all fine, 1 something unhealthy or failed, 2 usage, topology or
token error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetctl import batch, ops, top
from fleetctl import drain as draining
from fleetctl.auth import ADMIN_TOKEN_ENV, TOKEN_ENV, TokenError, resolve
from fleetctl.client import AsyncClient, RetryPolicy
from fleetctl.docker import Docker, DockerError
from fleetctl.jobclient import JobPolicy
from fleetctl.ports import BOUND, FREE, LISTENING, TAKEN, check_port
from fleetctl.topology import Fleet, TopologyError, load_fleet
from gateway.config.settings import load_settings
from gateway.errors import ConfigError

OK, BAD, USAGE, INTERRUPTED = 0, 1, 2, 130
GATEWAY_ENV = "FLEETCTL_GATEWAY"


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 200
    return Console(file=stream, width=width, highlight=False)


def _ints(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port/card number list: {value!r}") from None


def _parsers() -> argparse.ArgumentParser:
    topo = argparse.ArgumentParser(add_help=False)
    topo.add_argument(
        "--outputs",
        metavar="FILE",
        help="saved `pulumi stack output --json` (default: $FLEETCTL_OUTPUTS, "
        "else ask the Pulumi CLI)",
    )
    topo.add_argument("--stack", help="Pulumi stack name for `pulumi stack output`")
    sel = argparse.ArgumentParser(add_help=False)
    sel.add_argument("--port", type=_ints, action="extend", help="port(s), e.g. 9126,9136")
    sel.add_argument("--card", type=_ints, action="extend", help="card number(s)")
    sel.add_argument("--name", action="append", help="container name substring or glob")
    sel.add_argument("--host", action="append", help="host name or address")
    sel.add_argument("--kind", action="append", choices=("vllm", "paddlex", "gateway"))
    js = argparse.ArgumentParser(add_help=False)
    js.add_argument("--json", action="store_true", help="print JSON instead of a table")
    user = argparse.ArgumentParser(add_help=False)
    user.add_argument(
        "--token",
        help=f"gateway token for OCR (default: ${TOKEN_ENV}, else ${ADMIN_TOKEN_ENV}; "
        "prefer the variable, arguments show in `ps`)",
    )
    admin = argparse.ArgumentParser(add_help=False)
    admin.add_argument(
        "--admin-token",
        help=f"gateway admin token for /upstreams (default: ${ADMIN_TOKEN_ENV}, else the "
        "user token)",
    )

    p = argparse.ArgumentParser(
        prog="fleetctl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    s = sub.add_parser(
        "status", parents=[topo, sel, js, user, admin], help="table of every instance"
    )
    s.add_argument("--timeout", type=float, default=5.0, help="HTTP timeout (s)")
    t = sub.add_parser(
        "top", parents=[topo, user, admin], help="live view: hosts, cards, vLLM, PaddleX, queue"
    )
    t.add_argument("--interval", type=float, default=2.0, help="seconds between redraws")
    t.add_argument("--once", action="store_true", help="print one frame and exit")
    t.add_argument("--timeout", type=float, default=5.0, help="HTTP timeout (s)")
    sub.add_parser("ports", parents=[topo, sel, js], help="planned ports: listening/free/taken")
    v = sub.add_parser(
        "verify", parents=[topo, sel, js, user, admin], help="end-to-end test of each instance"
    )
    v.add_argument("--timeout", type=float, default=300.0, help="per-request timeout (s)")
    v.add_argument("--concurrency", type=int, default=16)
    for name, helptext in (("restart", "restart one instance"), ("logs", "container logs")):
        r = sub.add_parser(name, parents=[topo], help=helptext)
        r.add_argument("kind", choices=("vllm", "paddlex"))
        r.add_argument("port", type=int)
        r.add_argument("--host", help="host, when the port exists on several")
        if name == "restart":
            r.add_argument("--wait", type=float, default=600.0, help="wait for /health (s)")
            r.add_argument("--no-wait", action="store_true")
        else:
            r.add_argument("-n", "--tail", type=int, default=100, help="lines (default 100)")
            r.add_argument("-f", "--follow", action="store_true")
            r.add_argument(
                "--file",
                action="store_true",
                help="tail the service's log file inside the container instead",
            )
    sub.add_parser("npu", parents=[topo, sel], help="npu-smi info / nvidia-smi per host")
    sa = sub.add_parser(
        "start-all", parents=[topo, sel], help="start stopped containers and PaddleX services"
    )
    sa.add_argument("--wait", type=float, default=600.0, help="wait for /health (s)")
    sa.add_argument("--no-wait", action="store_true")
    _drain_parsers(sub, topo, user, admin, js)
    o = sub.add_parser("ocr", parents=[topo, user], help="batch OCR files and folders to markdown")
    o.add_argument("inputs", nargs="+", metavar="INPUT", help="files and folders")
    o.add_argument("--out", required=True, type=Path, help="output root for the .md files")
    o.add_argument(
        "--gateway", help=f"gateway URL (default: ${GATEWAY_ENV}, else the stack's gateway_url)"
    )
    o.add_argument("--concurrency", "-c", type=int, default=8)
    o.add_argument("--timeout", type=float, default=600.0, help="per-request timeout (s)")
    o.add_argument("--max-attempts", type=int, default=6, help="attempts per document")
    o.add_argument("--force", action="store_true", help="redo inputs with up-to-date output")
    o.add_argument("--report", type=Path, help=f"failures report (default OUT/{batch.REPORT_NAME})")
    o.add_argument("--no-progress", action="store_true")
    j = o.add_argument_group("long documents (the gateway's job API)")
    j.add_argument(
        "--jobs",
        choices=("auto", "always", "never"),
        default="auto",
        help="auto (default): PDFs of more than --job-pages pages go through a job; always: "
        "every document; never: all through /ocr",
    )
    j.add_argument(
        "--job-pages",
        type=_count,
        default=JobPolicy.min_pages,
        metavar="N",
        help=f"auto: a PDF of more than N pages is a job (default {JobPolicy.min_pages}, the "
        "gateway's default jobs.split_threshold_pages)",
    )
    j.add_argument(
        "--job-timeout",
        type=_seconds,
        default=JobPolicy.timeout_s,
        metavar="S",
        help=f"a job not done after S seconds is cancelled (default {JobPolicy.timeout_s:g})",
    )
    j.add_argument(
        "--job-model",
        metavar="NAME",
        help="the model to ask for (default: none, so the gateway takes its jobs.model)",
    )
    j.add_argument(
        "--gateway-config",
        type=Path,
        metavar="FILE",
        help="the gateway's config.json: its postprocess rules are applied to job results "
        "(default: the gateway's default rules)",
    )
    return p


def _drain_parsers(sub: Any, *parents: argparse.ArgumentParser) -> None:
    """``drain``, ``undrain`` and ``recycle``: PaddleX instances by URL, port or container
    name, and/or ``--card`` (with ``--host``)."""
    for name, helptext in (
        ("drain", "give PaddleX instances no new work; wait for their requests in flight"),
        ("undrain", "take drained PaddleX instances back in"),
        ("recycle", "restart PaddleX instances card by card: drain, restart, /health, undrain"),
    ):
        d = sub.add_parser(name, parents=list(parents), help=helptext)
        d.add_argument("targets", nargs="*", metavar="INSTANCE", help="URL, port or container")
        d.add_argument("--card", type=_ints, action="extend", help="every PaddleX of card(s)")
        d.add_argument("--host", action="append", help="the card's host")
        if name == "drain":
            d.add_argument("--wait", type=float, default=600.0, help="wait for requests (s)")
            d.add_argument("--ttl", type=_seconds, default=3600.0, help="the drain ends after")
        elif name == "recycle":
            d.add_argument("--drain-wait", type=float, default=600.0, help="drain wait (s)")
            d.add_argument("--wait", type=float, default=900.0, help="wait for /health (s)")
            d.add_argument("--force", action="store_true", help="restart with requests left")


def _count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"not a page count (0 or more): {value!r}")
    return n


def _seconds(value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        s = -1.0
    if not s > 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds (over 0): {value!r}")
    return s


def _job_policy(a: argparse.Namespace) -> JobPolicy:
    """The --jobs options as a `JobPolicy`; `ConfigError` for a bad --gateway-config."""
    rules = load_settings(a.gateway_config).postprocess if a.gateway_config else None
    return JobPolicy(
        mode=a.jobs,
        min_pages=a.job_pages,
        model=a.job_model or None,
        timeout_s=a.job_timeout,
        **({"postprocess": rules} if rules else {}),
    )


def _selection(fleet: Fleet, a: argparse.Namespace) -> list[Any]:
    kinds = tuple(a.kind) if a.kind else None
    insts = fleet.select(kinds=kinds, ports=a.port, cards=a.card, names=a.name, hosts=a.host)
    if not insts:
        raise TopologyError(
            "the selection matches no instance; known ports: " + fleet.describe_ports()
        )
    return insts


def _table(title: str, cols: list[str], rows: list[list[Any]], oks: list[bool]) -> Table:
    t = Table(title=title, header_style="bold")
    for c in cols:
        t.add_column(c, overflow="fold")
    for row, ok in zip(rows, oks, strict=True):
        t.add_row(*("-" if v is None else str(v) for v in row), style=None if ok else "red")
    return t


def cmd_status(fleet: Fleet, a: argparse.Namespace) -> int:
    admin_token = resolve(a.token, a.admin_token).admin
    rows = asyncio.run(ops.status(fleet, _selection(fleet, a), Docker(), a.timeout, admin_token))
    bad = [r for r in rows if not r["ok"]]
    refused = next((r["gateway_error"] for r in rows if "gateway_error" in r), None)
    failed = bool(bad) or refused is not None
    repair = ops.repair(rows, a.stack or fleet.stack)
    if a.json:
        doc: dict[str, Any] = {"ok": not failed, "instances": rows}
        if refused:
            doc["gateway_error"] = refused
        if repair:
            doc["repair"] = repair
        print(json.dumps(doc, indent=2))
        return BAD if failed else OK
    cols = [
        "host",
        "card",
        "kind",
        "port",
        "container",
        "container_state",
        "health",
        "vllm",
        "gateway",
    ]
    out = _console()
    out.print(
        _table(
            "fleet status",
            [
                "host",
                "card",
                "kind",
                "port",
                "container",
                "container",
                "health",
                "vLLM",
                "gateway view",
            ],
            [[r[c] for c in cols] for r in rows],
            [r["ok"] for r in rows],
        )
    )
    for e in dict.fromkeys(r["docker_error"] for r in rows if "docker_error" in r):
        out.print(f"[red]docker: {escape(e)}[/]")
    if refused:
        out.print(f"[red]gateway: {escape(refused)}[/]")
    out.print(
        f"{len(rows) - len(bad)}/{len(rows)} healthy"
        + ("; unhealthy: " + ", ".join(f"{r['kind']} {r['port']}" for r in bad) if bad else "")
    )
    _print_repair(out, repair)
    return BAD if failed else OK


def _print_repair(out: Console, repair: dict[str, Any] | None) -> None:
    """Names the missing or stopped containers and the one command that repairs them."""
    if not repair:
        return
    names = ", ".join(f"{c['container']} ({c['state']})" for c in repair["containers"])
    out.print(f"[red]missing or stopped containers: {escape(names)}[/]")
    out.print(
        f"repair: {escape(repair['command'])}  (creates missing containers, starts stopped "
        "ones and waits until they serve; a plain `pulumi up` does so only where the project "
        "refreshes first, as this project's Pulumi.yaml says)"
    )


def cmd_top(fleet: Fleet, a: argparse.Namespace) -> int:
    if not fleet.gateway_url:
        print("fleetctl: the topology names no gateway", file=sys.stderr)
        return USAGE
    try:
        top.run(
            fleet.gateway_url,
            resolve(a.token, a.admin_token).admin,
            interval=a.interval,
            once=a.once,
            console=_console(),
            timeout=a.timeout,
        )
    except top.TopError as e:
        print(f"fleetctl: {e}", file=sys.stderr)
        return BAD
    return OK


def cmd_ports(fleet: Fleet, a: argparse.Namespace) -> int:
    insts = _selection(fleet, a)
    results = [check_port(i) for i in insts]
    # after `pulumi up` the ports should listen; before it they should be free
    bad = [r for r in results if r.state in (TAKEN, BOUND)]
    if a.json:
        print(
            json.dumps(
                [
                    {
                        "host": r.inst.host,
                        "kind": r.inst.kind,
                        "port": r.inst.port,
                        "state": r.state,
                        "detail": r.detail,
                        "owner": r.owner,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        out = _console()
        out.print(
            _table(
                "planned ports",
                ["host", "kind", "port", "state", "detail", "process"],
                [
                    [r.inst.host, r.inst.kind, r.inst.port, r.state, r.detail, r.owner]
                    for r in results
                ],
                [r.state in (LISTENING, FREE) for r in results],
            )
        )
        counts = {s: sum(r.state == s for r in results) for s in {r.state for r in results}}
        out.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return BAD if bad else OK


def cmd_verify(fleet: Fleet, a: argparse.Namespace) -> int:
    token = resolve(a.token, a.admin_token).user
    insts = _selection(fleet, a)
    rows = asyncio.run(ops.verify(fleet, insts, a.timeout, a.concurrency, token))
    rows = ops.with_container_states(rows, insts, Docker())
    bad = [r for r in rows if not r["ok"]]
    repair = ops.repair(rows, a.stack or fleet.stack)
    if a.json:
        doc: dict[str, Any] = {"ok": not bad, "checks": rows}
        if repair:
            doc["repair"] = repair
        print(json.dumps(doc, indent=2))
    else:
        out = _console()
        out.print(
            _table(
                "verify",
                ["host", "card", "kind", "port", "check", "result", "detail", "seconds"],
                [
                    [
                        r["host"],
                        r["card"],
                        r["kind"],
                        r["port"],
                        r["check"],
                        "ok" if r["ok"] else "FAIL",
                        r["detail"],
                        r["elapsed_s"],
                    ]
                    for r in rows
                ],
                [r["ok"] for r in rows],
            )
        )
        out.print(f"{len(rows) - len(bad)}/{len(rows)} passed")
        _print_repair(out, repair)
    return BAD if bad else OK


def _say(msg: str) -> None:
    print(msg, flush=True)


def cmd_restart(fleet: Fleet, a: argparse.Namespace) -> int:
    inst = fleet.find(a.kind, a.port, a.host)
    ok = ops.restart(inst, Docker(), _say, None if a.no_wait else a.wait)
    return OK if ok else BAD


def cmd_logs(fleet: Fleet, a: argparse.Namespace) -> int:
    inst = fleet.find(a.kind, a.port, a.host)
    return ops.logs(inst, Docker(), lambda m: print(m, file=sys.stderr), a.tail, a.follow, a.file)


def cmd_npu(fleet: Fleet, a: argparse.Namespace) -> int:
    return OK if ops.npu(fleet, _selection(fleet, a), Docker(), _say) else BAD


def cmd_start_all(fleet: Fleet, a: argparse.Namespace) -> int:
    ok = ops.start_all(_selection(fleet, a), Docker(), _say, None if a.no_wait else a.wait)
    return OK if ok else BAD


def _print_drain(answers: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(answers, indent=2))
        return
    for gateway, answer in answers.items():
        for u in answer.get("upstreams", []):
            left = u.get("drained_for_s")
            ttl = f", {left:.0f}s of drain left" if left is not None else ""
            _say(f"{u['url']}: {u['state']}, {u['in_flight']} in flight{ttl} ({gateway})")


def cmd_drain(fleet: Fleet, a: argparse.Namespace) -> int:
    insts = draining.targets(fleet, a.targets, a.card, a.host)
    answers = draining.drain(fleet, insts, resolve(a.token, a.admin_token).admin, a.wait, a.ttl)
    _print_drain(answers, a.json)
    left = sum(int(answer.get("in_flight", 0)) for answer in answers.values())
    if left and not a.json:
        _say(f"{left} request(s) still in flight after {a.wait:g}s (the drain holds)")
    return BAD if left else OK


def cmd_undrain(fleet: Fleet, a: argparse.Namespace) -> int:
    insts = draining.targets(fleet, a.targets, a.card, a.host)
    _print_drain(draining.undrain(fleet, insts, resolve(a.token, a.admin_token).admin), a.json)
    return OK


def cmd_recycle(fleet: Fleet, a: argparse.Namespace) -> int:
    insts = draining.targets(fleet, a.targets, a.card, a.host)
    ok = draining.recycle(
        fleet,
        insts,
        resolve(a.token, a.admin_token).admin,
        _say,
        docker=Docker(),
        drain_wait_s=a.drain_wait,
        ready_s=a.wait,
        force=a.force,
    )
    return OK if ok else BAD


def cmd_ocr(a: argparse.Namespace) -> int:
    url = a.gateway or os.environ.get(GATEWAY_ENV)
    if not url:
        try:
            url = load_fleet(a.outputs, a.stack).gateway_url
        except TopologyError as e:
            raise TopologyError(
                f"no gateway URL: pass --gateway URL or set {GATEWAY_ENV} ({e})"
            ) from None
        if not url:
            raise TopologyError("the stack outputs have no gateway_url; pass --gateway URL")
    err = _console(stderr=True)
    tokens = resolve(a.token)
    policy = _job_policy(a)
    work = batch.plan(a.inputs, a.out, force=a.force)
    err.print(
        f"{len(work.todo)} to OCR, {len(work.uptodate)} up to date (skipped), "
        f"{len(work.invalid)} invalid; gateway {url}, "
        + (f"token from {tokens.user_from}" if tokens.user else "no token")
    )
    summary = batch.Summary()
    client = AsyncClient(
        url,
        token=tokens.user or "",
        timeout=a.timeout,
        retry=RetryPolicy(max_attempts=a.max_attempts),
        on_retry=summary.on_retry,
    )

    async def main() -> None:
        async with client:
            await batch.run(
                work.todo, client, a.concurrency, summary, err, not a.no_progress, policy
            )

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        summary.interrupted = True
    failures = work.invalid + summary.failures
    report = batch.write_report(a.report or a.out / batch.REPORT_NAME, failures)
    rate = summary.done / summary.elapsed if summary.elapsed > 0 else 0.0
    err.print(
        f"{'interrupted: ' if summary.interrupted else ''}{summary.done} done "
        f"({summary.pages} pages{f', {summary.via_jobs} via jobs' if summary.via_jobs else ''}), "
        f"{len(failures)} failed, {len(work.uptodate)} skipped "
        f"in {summary.elapsed:.1f}s ({rate:.2f} doc/s, {summary.retries} retries)"
    )
    if report:
        err.print(f"failures report: {report}")
        for f in failures[:10]:
            err.print(f"  [red]{f.status}[/] {f.file}: {f.message}")
        if len(failures) > 10:
            err.print(f"  ... and {len(failures) - 10} more")
    if summary.refused is not None:
        err.print(f"[red]fleetctl: {escape(str(summary.refused))}[/]")
        err.print(f"stopped: {summary.left} not done; re-run with a valid token to continue")
        return USAGE
    if summary.interrupted:
        err.print("re-run the same command to continue; finished files are kept")
        return INTERRUPTED
    return BAD if failures else OK


COMMANDS = {
    "status": cmd_status,
    "top": cmd_top,
    "ports": cmd_ports,
    "verify": cmd_verify,
    "restart": cmd_restart,
    "logs": cmd_logs,
    "npu": cmd_npu,
    "start-all": cmd_start_all,
    "drain": cmd_drain,
    "undrain": cmd_undrain,
    "recycle": cmd_recycle,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fleetctl`` script; returns the exit code."""
    a = _parsers().parse_args(argv)
    try:
        if a.cmd == "ocr":
            return cmd_ocr(a)
        fleet = load_fleet(a.outputs, a.stack)
        return COMMANDS[a.cmd](fleet, a)
    except (TopologyError, batch.BatchError, TokenError, ConfigError) as e:
        print(f"fleetctl: {e}", file=sys.stderr)
        return USAGE
    except (DockerError, draining.DrainError) as e:
        print(f"fleetctl: {e}", file=sys.stderr)
        return BAD
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `fleetctl status --json | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BAD


if __name__ == "__main__":
    sys.exit(main())
