"""The paddleocr-fleet stack: settings -> plan -> the `Fleet` component -> outputs."""

import pulumi

from components.fleet import Fleet, FleetArgs, read_settings
from components.plan import build_plan

settings = read_settings()
fleet = Fleet("fleet", FleetArgs(settings, build_plan(settings)))
for key, value in fleet.outputs().items():
    pulumi.export(key, value)
