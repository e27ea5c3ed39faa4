"""`python -m sim.vllm serve MODEL_PATH [flags]` (the image installs it as `vllm`)."""

import sys

from .cli import main

sys.exit(main())
