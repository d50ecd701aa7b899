"""A driver process for the process tests: a job that runs until it is stopped (or for argv[2] steps), with a
checkpoint every argv[3] seconds (default: run()'s)."""

import faulthandler
import signal
import sys

from jobs import TinyLogR

faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that waits in vain asks for the stacks
# Ctrl-C as in a terminal: a suite started in the background by a shell (`make test &`) inherits SIGINT
# ignored, and Python then leaves it ignored (a run in the background is meant to survive Ctrl-C).
signal.signal(signal.SIGINT, signal.default_int_handler)

job = TinyLogR()
job.target_loss = 1e-6  # never reached: the test stops the driver, or max_steps (argv[2]) does
job.max_seconds = 300
job.run(db=sys.argv[1], nodes=2, quiet=True, patience=None,
        max_steps=int(sys.argv[2]) if len(sys.argv) > 2 else None,
        **({"checkpoint_every_s": float(sys.argv[3])} if len(sys.argv) > 3 else {}))
