"""``python -m fleetctl`` runs the CLI."""

import sys

from fleetctl.cli import main

sys.exit(main())
