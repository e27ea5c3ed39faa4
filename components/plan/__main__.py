"""`python -m components.plan`: the plan CLI (:mod:`components.plan.cli`)."""

from components.plan.cli import main

raise SystemExit(main())
