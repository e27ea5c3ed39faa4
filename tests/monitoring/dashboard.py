"""The Grafana dashboards' PromQL (monitoring/grafana/*.json), as Prometheus can run it.

Grafana substitutes its template variables before it sends a query; these helpers do the same
with every value selected (``$host`` and ``$card`` -> ``.*``), so a test can run each panel's
query against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

GRAFANA = Path(__file__).resolve().parents[2] / "monitoring" / "grafana"
ALL = ".*"


def dashboards() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, json.loads(path.read_text())) for path in sorted(GRAFANA.glob("*.json"))]


def substitute(expr: str, variables: list[str]) -> str:
    for name in variables:
        expr = expr.replace(f"${name}", ALL)
    return expr


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title / refId, PromQL with every variable at "All") of every panel target and
    the selector of every ``label_values(selector, label)`` variable."""
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    out = []
    for variable in dashboard["templating"]["list"]:
        match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
        assert match, f"variable {variable['name']}: not a label_values query"
        out.append((f"variable {variable['name']}", substitute(match.group(1), variables)))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            label = f"{panel['title']} / {target['refId']}"
            out.append((label, substitute(target["expr"], variables)))
    return out
