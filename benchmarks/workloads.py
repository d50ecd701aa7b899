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
  (sd 0.3) each time it is read. The unchanged CNN memorises its digits
  in 30 s. Since 2026-11-24 (issue 18) it trains on 4,000 of the 5,000
  and is evaluated on the other 1,000; the targets below were set on all
  5,000.
- ``mlp``: a small dense network on a teacher network's labels
  (``examples/mlp.py``): tiny steps, so communication and the number of
  workers dominate its pace.

Where asynchronous staleness matters: the CNN, with momentum. In the
first sized run (2026-11-24, target 0.06), settings with one worker reached
it in 1,370-1,380 iterations, with three workers in 2,223; at 0.045 the
gap is smaller (2,313-2,695 against 2,831 in the second run). On the MLP at
this learning rate it hardly matters (6,413 iterations with one worker,
6,468 with three); at a learning rate of 0.1 it does, but the loss then
sits on a noise floor that a target can only cross by chance.

Sizes and targets were set from runs at TensorFlow's default setting (one
ps, three workers, asynchronous) and from that first sized run's fixed
settings, never from tfonline's results. A target is crossed by the
smoothed loss (an exponential average), which dips below the loss's trend
by chance: the first crossing comes earlier than the trend alone says.

| workload | first sized run: target, best fixed s (with start-up) | target to 2026-11-27 | target now |
|---|---|---|---|
| logr | 0.54, 74 s (the default setting: 62 s) | 0.54 | 0.525 |
| cnn | 0.06, 51 s | 0.045 | 0.02 |
| mlp | 0.50, 38 s | 0.47 | 0.45 (0.35 at a learning rate of 0.02 since 2026-12-01, below) |

The targets now were set on 2026-11-27 on a machine about four times as
fast on the CNN as the first one: there the quick bench's best fixed
settings took 43-53 s with start-up (36-50 s after it), short of a minute.
One run at the default setting per workload, past the old targets
(``benchmarks/sizing.py``; NOTES.md, thirty-fourth session), gave the seconds
after start-up at which the smoothed loss first crossed each candidate:

| workload | old target | candidates, s after start-up |
|---|---|---|
| logr | 0.54: 50.4 | 0.535: 58.7, 0.53: 70.0, **0.525: 70.0**, 0.52: 86.1 |
| cnn | 0.045: 47.7 | 0.035: 58.1, 0.03: 68.9, 0.025: 69.8, **0.02: 81.4** |
| mlp | 0.47: 50.2 | 0.46: 76.4, **0.45: 83.4**, 0.44: 106.4, 0.43: 190.2 |

LogR's is the first candidate at about 70 s at the default setting, so
that a fixed setting up to about 15% faster (the quick bench's best fixed
was 0.93-1.15x the default's time) still trains a minute after start-up.
The CNN's and the MLP's were first set the same way (0.025 and 0.46), and
the quick bench run at them (``benchmarks/results/2026-11-27-quick-resized.md``)
found their iterations to the target vary more than that between runs of
one setting: the CNN's best fixed setting trained 56 s after start-up, the
MLP's default (faster than its four random settings) 53 s, in 25,704
iterations against the sizing run's 31,857. Their targets were then
lowered to the first candidates at about 80 s.

``full`` mode has its own, lower targets (:data:`FULL_TARGETS`), for
jobs of about 5 minutes at the default setting. Until 2026-11-28 they were
extrapolated from the first machine's runs (LogR 0.52, CNN 0.03, MLP
0.44); on this one the default setting reached them in 69-106 s, and the
CNN's was above its new quick target. ``python benchmarks/sizing.py
--seconds 400`` (one run each, 2026-11-28) gave, in seconds after
start-up: LogR 0.49 at 195.4, **0.485 at 297.5**, 0.48 not within 396 s;
the CNN 0.006 at 255.4, **0.005 at 304.3**; the MLP 0.43 at 93.2, **0.42 at
231.6**, 0.415 not within 396 s, so its full jobs are about 4 minutes
(a lower target may lie under the MLP's floor). In that run the MLP crossed
its quick target, 0.45, at 47.8 s, against 83.4 s the day before: its
iterations to a target vary most. SVM's (0.64) was not measured here.

**The MLP resized, 2026-12-01.** Both its targets lay under the floor of its
loss's trend, so a job reached them only by a dip of the smoothed loss: a
wait for luck, not for training. At the learning rate of 0.07 the mean of
the last 2,000 losses (``sizing.py``'s trend) of the default setting's full
runs at seeds 0-2 fell to 0.482-0.492 by 52,000-73,000 iterations and no
lower; seed 2's then rose to 0.515 by 160,000 iterations (700 s) without
reaching 0.42, while seeds 0 and 1 crossed it by dips at 53,500 and 61,388
iterations. At 0.02 (``python benchmarks/sizing.py --workloads mlp
--seconds 420 --learning-rate 0.02``, twice) the trend kept falling:
0.36 at 106-109 s after start-up, 0.30 at 217 s, 0.26 at 336 s. The
smoothed loss crossed 0.35 at 77.9 and 81.0 s (**the quick target**) and
0.22 at 308.6 s (**full**; 0.24 at 252.6 s). It crosses some 0.04 under
the trend (the most a smoothed loss dips in that many iterations), but the
trend itself comes down to the target soon after, so the wait is set by
training.
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
    target_loss = 0.525


class SVM(_Sized, svm.SVM):
    categories_per_field = 10000
    target_loss = 0.66


class CNN(_Sized, cnn.CNN):
    shift, noise = 3, 0.3
    target_loss = 0.02


class MLP(_Sized, mlp.MLP):
    learning_rate = 0.02
    target_loss = 0.35


SIZED = {"logr": LogR, "svm": SVM, "cnn": CNN, "mlp": MLP}
# The examples as they are: the benchmark's own test runs these (``--mode smoke``).
EXAMPLES = {"logr": logr.LogR, "svm": svm.SVM, "cnn": cnn.CNN, "mlp": mlp.MLP}
# full mode: targets that the sized workloads reach after about 5 minutes at the default setting (svm: not measured).
FULL_TARGETS = {"logr": 0.485, "svm": 0.64, "cnn": 0.005, "mlp": 0.22}


def job(name: str, mode: str):
    """A new job of workload ``name`` at ``mode``'s size."""
    if mode == "smoke":
        return EXAMPLES[name]()
    made = SIZED[name]()
    if mode == "full":
        made.target_loss = FULL_TARGETS[name]
    return made
