"""Online reconfiguration: what a setting change needs, and which technique does it.

A change from one setting to another is classified by the paper's types
(I-a: the worker set changes; I-b: the ps set changes; II: the setting
only) and turned into a :class:`Plan`: the actions that carry it out. The
online techniques (``run(reconfig="online")``, the default), combined as a
change needs them and recorded as, e.g., ``"odmr+tdr"``:

- **SSR** (II). Session knobs (the graph optimizer switches, XLA, bfloat16
  transfers, users' added knobs): the workers close their sessions and
  open new ones with the new ``ConfigProto`` on the same graphs. Variables
  stay on the servers and each input iterator keeps its position (it has a
  shared name on its worker's server). Thread knobs live in the node
  servers' config: the nodes whose pools change restart, forked from a
  process that has TensorFlow imported already (milliseconds, not the
  import's 4 s); what lived on a restarted ps node is read first and
  restored after.
- **ODMR** (I-b). A large variable is cut into one row block per ps node
  (small ones stay whole), so a new ps count is a new cut: its blocks are
  named after it (``w/part_0_of_3``) and live beside the old ones while
  the switch is made. The placement map keeps each whole variable where
  it was unless the balance needs it elsewhere
  (:func:`tfonline.placement.recut_placement`); a variable that stays is
  the same resource on the same node for the new graphs. Nothing is
  copied at the switch: the workers resume on *transition graphs* in
  which each new block (with its optimizer slots) is created on its node
  at its first use from its rows of the old blocks, and each whole
  variable that moves from its old location, by a conditional that does
  nothing once it exists; the first step's update then applies there,
  and every later one is a normal update. Once every moved variable lives
  at its new node, each worker goes on to the steady-state graphs (no
  conditional) at its next iteration and the old copies are released.
  Each destination node's check-and-create runs under a lock on that node
  (TensorFlow's ``MutexLock``), so exactly one first step creates each
  variable: a second creation would undo the first step's update. The
  paper cut once, at job start, finely enough for every ps count, so that
  a ps change moves some blocks and copies none; but every block costs
  every step a gather and an update (six blocks on one ps: LogR 34%
  slower per iteration here), which a long job pays on every step, while
  a new cut moves the variable once.
- **TDR** (I-a, and a ps change, which moves the workers to other nodes).
  The input is re-sharded over the new workers. The guarantee, with
  ``input_fn(shard, num_shards)`` cutting the data round-robin (shard i
  gets batches i, i + n, ...): after B batches read under the old
  setting, each of the n new workers skips its first ceil(B / n) batches.
  For a finite dataset (one epoch, or within ``repeat()``'s first epoch),
  in sync mode, no batch is read twice and at most n − 1 of them are
  passed over; the workers' shards never overlap. In async mode the same
  holds when the workers ran at the same pace; a worker that ran ahead of
  the others may see up to its lead again, and so may the batches the old
  workers read while a live switch opens the new input (below). For a
  streaming dataset (one that is not indexed, e.g. generated or read from
  a queue), the shards stay disjoint but the position is the same
  approximation: batches are counted, not identified.

**No global stop in async mode.** An asynchronous job's switch is *live*
when no node restarts: the switch is prepared and made beside the
workers, which go on training on the old setting; then the new steps are
published at once, and each worker takes its next iteration on them (a
worker the new setting drops ends there, a new one starts). A step that
was running finishes on the old graphs and is counted for the old
setting (``reconfigurations.iterations_during`` counts the iterations
trained while the switch was made). The price, documented and tested
(tests/test_reconfig.py, the counter model): such a step's push to a
partition that moved may land on the old copy after the new one was
created from it, and is lost, so a switch loses at most one push per old
worker for each partition it moves, and never counts one twice. A switch
that restarts nodes (thread knobs) and every switch of a synchronous job
still pauses the workers, each at its iteration's end: a restarted node
stops the steps that use it anyway, and what lived on a restarted ps is
read and restored by the driver, which needs no step writing it meanwhile.

``run(reconfig="restart")`` makes every switch read every variable, open the
new layout's graphs, initialise and restore everything.
``run(reconfig="checkpoint")`` is what existing systems do, the baseline
the online techniques are measured against: save a checkpoint with
``tf.compat.v1.train.Saver``, restart every node, build the graphs and
sessions anew, restore the checkpoint, resume.

**Where each part lives.** :mod:`.plan` classifies a change, once: the tuner
attaches the :class:`Plan` to its decision. :mod:`.backend` is the hook a
driver calls for every switch (:class:`Reconfig`: prepare ahead, live or
paused, apply, settle after a transition, close). :mod:`.tensorflow` is the
TensorFlow backend; it hands each plan to :mod:`.ssr`, :mod:`.odmr` (ODMR,
TDR, node restarts) or :mod:`.baselines` ("restart", "checkpoint"), which
work on the job's graphs and sessions (:class:`tfonline._sessions.Engine`).
:mod:`.cost` measures what a switch cost the job. Nothing here imports the
tuner or the driver.
"""

from tfonline.reconfig.backend import Reconfig, SwitchContext, Switched
from tfonline.reconfig.plan import (
    COMPILING_KNOBS,
    LAYOUT_KNOBS,
    TECHNIQUES,
    THREAD_KNOBS,
    Plan,
    check_technique,
    plan,
    reconfiguration_types,
    switch_parts,
)

__all__ = ["Reconfig", "Switched", "SwitchContext", "Plan", "plan", "check_technique", "reconfiguration_types",
           "switch_parts", "TECHNIQUES",
           "THREAD_KNOBS", "LAYOUT_KNOBS", "COMPILING_KNOBS"]
