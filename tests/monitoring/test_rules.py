"""The alert rules (monitoring/rules/*.yml): valid, linted, and each one unit-tested by
``promtool test rules`` with synthetic series (monitoring/tests/*.yml)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.monitoring.tools import require

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
RULE_FILES = sorted((MONITORING / "rules").glob("*.yml"))
TEST_FILES = sorted((MONITORING / "tests").glob("*_test.yml"))


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_rules_are_valid_and_lint_clean() -> None:
    promtool = require("promtool", "prometheus", "Prometheus (promtool)")
    assert RULE_FILES
    result = run(promtool, "check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_passes_its_unit_tests() -> None:
    promtool = require("promtool", "prometheus", "Prometheus (promtool)")
    result = run(promtool, "test", "rules", *map(str, TEST_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_expects_it_to_fire() -> None:
    alerts = {
        rule["alert"]
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    fired: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check.get("exp_alerts"):
                    fired.add(check["alertname"])
    assert alerts, "no alert rules"
    assert alerts - fired == set(), "alerts no test sees fire"


def test_vllm_series_in_the_rules_are_the_ones_the_simulator_exports() -> None:
    from tests.sim.test_vllm_metrics import VLLM_SERIES

    used = set()
    for path in RULE_FILES:
        used |= set(re.findall(r"vllm:[a-z0-9_]+", path.read_text()))
    assert used and used <= VLLM_SERIES
