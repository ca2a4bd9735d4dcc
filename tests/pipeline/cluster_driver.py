"""`mqfs pipeline` jobs on a standalone cluster, one application for all of them: each job is
a start of the CLI (`cli.main`) in this one driver, in the session the CLI itself would make
(`session(master, ...)`), so the cluster starts a driver and executors once, not once a job.
Arguments: the master URL, a directory for what each job printed, and each job's arguments
as JSON. Job i leaves i.out and i.err (what the CLI printed, file descriptors 1 and 2) and
i.rc (its exit code)."""

import json
import os
import sys

from mqfs.pipeline import cli
from mqfs.pipeline.spark import session

master, out, *jobs = sys.argv[1:]
spark = session(master, app="mqfs pipeline", log_level="fatal")  # as cli.main starts it
for i, job in enumerate(jobs):
    saved = os.dup(1), os.dup(2)
    with open(os.path.join(out, f"{i}.out"), "w") as o, open(os.path.join(out, f"{i}.err"), "w") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            rc = cli.main(json.loads(job))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    with open(os.path.join(out, f"{i}.rc"), "w") as f:
        f.write(str(rc))
spark.stop()
