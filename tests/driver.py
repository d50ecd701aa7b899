"""A driver process for the process tests: a job that runs until it is stopped."""

import faulthandler
import signal
import sys

from jobs import TinyLogR

faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that waits in vain asks for the stacks

job = TinyLogR()
job.target_loss = 1e-6  # never reached: the test stops the driver
job.max_seconds = 300
job.run(db=sys.argv[1], nodes=2, quiet=True)
