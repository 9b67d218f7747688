"""`python -m compensator.cli` is the `compensator` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
