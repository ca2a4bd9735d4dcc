"""`python -m mqfs.pipeline JOB ...` is `mqfs pipeline JOB ...`: the mqfs command runs it this way
so that the filesystem side never imports the pipeline."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
