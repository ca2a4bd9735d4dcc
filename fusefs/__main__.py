"""`python -m mqfs.fusefs` is the `mqfs` command."""

import sys

from .cli import main

sys.exit(main())
