"""The simulator: the driver's loop and the real tuner against a modelled cluster (DESIGN §1, "backends").

- :mod:`tfonline.simulator.model`: the speed model (Optimus's f(p, w) with
  thread, crowding and XLA terms), the loss curve with staleness, and switch
  costs by technique;
- :mod:`tfonline.simulator.run`: a simulated job (:class:`Simulation`), which
  writes the same repository rows as a real one, and many fixed settings at
  once (:func:`fixed_runs`);
- :mod:`tfonline.simulator.calibrate`: a speed model fitted from a
  repository of real fixed-setting runs, with its error on runs left out.

``tfonline simulate`` and ``tfonline calibrate`` are the commands. Nothing
here imports TensorFlow.
"""

from tfonline.simulator.model import FEATURES, LossCurve, SpeedModel, SwitchCosts, features
from tfonline.simulator.run import FixedOutcome, Segments, Simulation, Workload, fixed_runs, paper_scale

__all__ = ["FEATURES", "FixedOutcome", "LossCurve", "Segments", "Simulation", "SpeedModel", "SwitchCosts", "Workload",
           "features", "fixed_runs", "paper_scale"]
