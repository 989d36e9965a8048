# Copyright 2026 The linattn-verify authors. Licensed under the Apache License, Version 2.0.
"""``python -m linattn_verify.cli``."""

import sys

from linattn_verify.cli import main

sys.exit(main())
