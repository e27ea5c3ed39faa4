"""The paddleocr-fleet stack: settings -> plan -> components -> outputs."""

import pulumi

from components.fleet import Fleet, read_settings
from components.plan import build_plan

settings = read_settings()
fleet = Fleet(settings, build_plan(settings))
for key, value in fleet.outputs().items():
    pulumi.export(key, value)
