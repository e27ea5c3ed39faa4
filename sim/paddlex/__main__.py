"""`python -m sim.paddlex --serve ...` (the image installs it as `paddlex`)."""

import sys

from .cli import main

sys.exit(main())
