"""The paper benchmark's workloads: the examples, at the benchmark's sizes.

The examples are sized for a demo (8-25 s each here). On jobs that short,
cluster start-up and the tuner's first phases are most of the job, and
nothing later can pay back. The benchmark therefore trains on more data
(generated, as the data rule asks), to targets their curves reach only after
a minute or more at the best setting measured here:

- ``logr``, ``svm``: 10,000 categories per field, not 1,000 (260,000
  features to learn, not 26,000). With 1,000, both plateau by 45 s (LogR at
  about 0.505, SVM at about 0.59), so no target both takes a minute and is
  reached for certain.
- ``cnn``: every digit moved by up to 3 pixels and given Gaussian noise
  (sd 0.3) each time it is read. The unchanged CNN memorises its 5,000
  digits in 30 s.
- ``mlp``: the workload where asynchronous staleness matters
  (``examples/mlp.py``). With three asynchronous workers it runs 1.4x more
  iterations per second than with one and needs about as many more
  iterations to reach the same loss.

Targets and sizes were set from single runs at TensorFlow's default
setting (one ps, three workers, asynchronous; the smoothed loss at seconds
of training), before any tuned run, and not changed after (``quick``):

| workload | 30 s | 60 s | 90 s | 120 s | target |
|---|---|---|---|---|---|
| logr | 0.577 | 0.554 | 0.543 | 0.533 | 0.54 |
| cnn | 0.106 | 0.069 | 0.065 | 0.050 | 0.06 |
| mlp | 0.546 | 0.515 | - | - | 0.50 |

``full`` mode has its own, lower targets for jobs of 5 minutes or more
(:data:`FULL_TARGETS`).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples"))

import cnn  # noqa: E402
import logr  # noqa: E402
import mlp  # noqa: E402
import svm  # noqa: E402

MAX_SECONDS = 3600  # a fixed run is stopped earlier by the benchmark's cap


class _Sized:
    """What the sized workloads share: the benchmark's cap stops a run that does not converge, not patience.

    A run near its target on a flat curve may go 5,000 iterations without a
    0.1% better smoothed loss and still converge later; here it runs on to
    the cap and counts at the cap, as any run that does not converge.
    """

    max_seconds = MAX_SECONDS
    patience = None


class LogR(_Sized, logr.LogR):
    categories_per_field = 10000
    target_loss = 0.54


class SVM(_Sized, svm.SVM):
    categories_per_field = 10000
    target_loss = 0.66


class CNN(_Sized, cnn.CNN):
    shift, noise = 3, 0.3
    target_loss = 0.06


class MLP(_Sized, mlp.MLP):
    learning_rate = 0.07
    target_loss = 0.50


SIZED = {"logr": LogR, "svm": SVM, "cnn": CNN, "mlp": MLP}
# The examples as they are: the benchmark's own test runs these (``--mode smoke``).
EXAMPLES = {"logr": logr.LogR, "svm": svm.SVM, "cnn": cnn.CNN, "mlp": mlp.MLP}
# full mode: targets that the sized workloads reach after 5 minutes or more at the default setting.
FULL_TARGETS = {"logr": 0.52, "svm": 0.64, "cnn": 0.04, "mlp": 0.47}


def job(name: str, mode: str):
    """A new job of workload ``name`` at ``mode``'s size."""
    if mode == "smoke":
        return EXAMPLES[name]()
    made = SIZED[name]()
    if mode == "full":
        made.target_loss = FULL_TARGETS[name]
    return made
