"""Entry point for ``python -m tests.e2e.cluster``."""

import sys

from .cli import main

sys.exit(main())
