"""`python -m compensator.proxy --config F --db D` is `compensator serve --config F --db D`."""

from __future__ import annotations

import sys

from ..cli.serve import main

sys.exit(main())
