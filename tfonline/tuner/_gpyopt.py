"""The only module that touches GPyOpt: a GP over (encoded setting, loss) and EI, ask/tell style.

GPyOpt changes global state when imported (``warnings.filterwarnings
("ignore")`` for every warning) and draws from NumPy's global random
generator. Both are contained here: the import runs inside
``warnings.catch_warnings()``, and every call runs with NumPy's global
generator seeded from (seed, number of observations) and restored after.
The same seed and the same observations therefore give the same suggestion.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import math
import sys
import types
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from tfonline.setting import setting_key
from tfonline.tuner.grid import SettingGrid, feasible
from tfonline.tuner.improvement import Prediction, against, expected_improvement, expected_improvements, seconds
from tfonline.tuner.space import KnobSpace
from tfonline.tuner.speed import MODEL_KNOBS, SpeedPrior

_gpyopt = None
_blas: ThreadpoolController | None = None

# The GP is fitted to the latest this many observations, plus the latest one
# of every setting seen only before them. A fit's cost grows with the
# observations (29 decisions of a 140-s job took 0.8 s each on average, up to
# 3.2 s, on 2 busy cores), while old observations, made at losses far from
# today's, say little that the latest of their setting does not.
MAX_OBSERVATIONS = 30

# L-BFGS iterations per fit of the GP's hyperparameters (GPyOpt's default is
# 1,000). On the simulator's paper-scale job, fits of 30 observations in 12
# dimensions ran about 500 iterations, 0.7 s each (a decision: two fits);
# capped at 100, a tuned job of 52 online decisions simulated in 2x less
# time and ended as close to the best fixed setting, and the tuner's tests
# on the known surface (tests/test_tuner_loop.py) pass unchanged.
GP_FIT_ITERATIONS = 100
GP_FIT_RESTARTS = 2  # L-BFGS starts per fit: GPy's initial hyperparameters, and one random draw

# Once a fit from GPy's own start and a random one (cold) has seen WARM_FROM
# observations, a refit starts L-BFGS once, from the latest fit's
# hyperparameters (warm), until the observations seen have grown WARM_GROWTH
# times since that cold fit, which is then made again. On a simulated CNN-like
# job's observations (12-66, all knobs free), a warm fit took a quarter of a
# cold one's CPU (0.20-0.74 s against 0.87-1.57 s) and reached the same
# likelihood within 0.5, or a higher one, in six fits of ten; three of the four
# lower were of 12-24 observations: a young fit is a poor start. Warm from any
# size, the known-surface loop test (tests/test_tuner_loop.py) lost its seed 0
# (12 of 30 decisions within 10% of the optimum, 25 cold); from 30, its seeds
# 0-5 gave the cold fits' counts, and the CNN-like job's six seeds their times
# and worker counts, in 146 s of CPU against 519 s (NOTES.md, thirty-second session).
WARM_GROWTH = 1.5
WARM_FROM = MAX_OBSERVATIONS

# A fit is blind to the setting when the variance its kernel gives the setting
# (alone, and with the loss) is under this share of the data's (normalised).
# A tuned CNN job's one fit put all of it on the loss, with no noise: every
# setting then looked alike, and the fit was reused for the whole online phase
# (NOTES.md, twenty-ninth session). A blind fit is refitted once more
# observations have come (GPOptimizer.fit), whatever the overhead share says.
BLIND = 1e-3

# EI is maximised over the discrete settings themselves (see Fitted.maximise):
# every setting when the space has at most this many, else this many random
# ones, then a climb, one knob at a time, from the best few of them.
ENUMERATE_AT_MOST = 25_000
CLIMB_FROM = 5


def _import():
    global _gpyopt
    if _gpyopt is None:
        _give_gpyopt_its_version()
        with warnings.catch_warnings():
            import GPyOpt

            _gpyopt = GPyOpt
    return _gpyopt


def _one_blas_thread():
    """A context that runs BLAS on the calling thread alone. The libraries are found once, after GPyOpt's
    import has loaded GPy's and SciPy's (``threadpool_limits`` finds them at every call: 1.9 ms, against
    0.01 ms for a kept controller)."""
    global _blas
    if _blas is None:
        _import()
        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


def inherited(observations: Sequence[Observation]) -> bool:
    """Whether any observation comes from another job at a distance: the GP then has a job column."""
    return any(o.distance > 0 for o in observations)


def _give_gpyopt_its_version() -> None:
    """Provides ``GPyOpt.__version__`` from the package's metadata, so that GPyOpt is imported without
    ``pkg_resources``, which setuptools 81 removed (patches/README.md).

    GPyOpt 1.2.6's ``__version__`` module is its only use of ``pkg_resources``; a module already in
    ``sys.modules`` under that name is what ``from .__version__ import __version__`` then finds.
    """
    name = "GPyOpt.__version__"
    if name not in sys.modules:
        module = types.ModuleType(name)
        try:
            module.__version__ = importlib.metadata.version("GPyOpt")
        except importlib.metadata.PackageNotFoundError:
            module.__version__ = "dev"  # what GPyOpt itself says then
        sys.modules[name] = module


@contextlib.contextmanager
def _contained(seed: int, salt: int):
    """NumPy's global generator seeded for this call, warnings quiet, BLAS on this thread alone; all restored
    after.

    OpenBLAS's threads (one per core) made a decision's CPU three times the
    work's on this 2-core machine, and a fit's up to twice, in no less wall
    time: a GP of 20-40 observations is too small to share out, and the
    threads spin while they wait. That CPU was taken from the job's nodes and
    not counted in the tuner's overhead (the calling thread's CPU time): a
    decision without a fit measured 0.17 s of the process's CPU on 2 threads,
    0.05 s on one (NOTES.md, thirty-third session).
    """
    state = np.random.get_state()
    digest = hashlib.sha256(f"{seed}:{salt}".encode()).digest()
    np.random.seed(int.from_bytes(digest[:4], "little"))
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"), _one_blas_thread():
            warnings.simplefilter("ignore")
            yield
    finally:
        np.random.set_state(state)


@dataclass(frozen=True)
class Observation:
    """One triple of the paper as the GP sees it: a setting, the loss before its segment, and its time per
    iteration (R̂ is that × the iterations its setting needs, :meth:`GPOptimizer.suggest`)."""

    setting: dict[str, Any]
    loss: float
    per_iteration_s: float
    distance: float = 0.0  # inherited from another job: its workload's distance from this one's (0: this job's)
    job: str = ""  # the job it comes from ("": this job)


def window(observations: Sequence[Observation], size: int = MAX_OBSERVATIONS) -> list[Observation]:
    """The latest ``size`` observations, plus the latest of each setting seen only before them; in order."""
    observations = list(observations)
    if len(observations) <= size:
        return observations
    recent = observations[-size:]
    seen = {setting_key(o.setting) for o in recent}
    kept = []
    for o in reversed(observations[:-size]):
        if setting_key(o.setting) not in seen:
            seen.add(setting_key(o.setting))
            kept.append(o)
    return kept[::-1] + recent


@dataclass(frozen=True)
class Candidate:
    """A setting that maximises EI (over the space, or with some knobs held), and its EI over the current one."""

    setting: dict[str, Any]
    expected_improvement_s: float  # E[gain over the current setting], in seconds of remaining time
    prediction: Prediction


@dataclass(frozen=True)
class Suggestion:
    candidates: list[Candidate]  # s* first, then s* with the held knobs at their current values (if any)
    current_s: float  # the GP's mean remaining time of the current setting
    best_known: Prediction | None = None  # the observed setting (not the current) predicted best at the loss
    refitted: bool = True  # the GP's hyperparameters were fitted for it (else the latest fit's: GPOptimizer.fit)

    @property
    def setting(self) -> dict[str, Any]:
        return self.candidates[0].setting

    @property
    def expected_improvement_s(self) -> float:
        return self.candidates[0].expected_improvement_s


class GPOptimizer:
    """Fits a GP to observations and maximises EI over settings with the loss fixed (GPyOpt's ``context``).

    The GP's inputs are the space's encoded free knobs plus the loss; its
    output is the log of the time per iteration, normalised by GPyOpt. The
    paper's R̂ is that × the iterations left; those the GP does not learn:
    they are the job's curve's iterations left at the loss over the
    setting's convergence speed, both plug-in estimates
    (:mod:`tfonline.tuner.convergence`), combined with the GP's prediction
    in :meth:`suggest`. Left in the GP's output, the iterations left, which
    move a lot with the loss, dominated its variance, and the settings'
    differences drowned in them; and a setting's speed measured on one
    short segment is noise.

    The kernel is a Matérn 5/2 over the knobs (one length scale per knob)
    *plus* a Matérn 5/2 over the loss *plus* their product. The first two
    make a setting seen early in the job inform its prediction at today's
    loss (with one kernel over both, a setting not seen lately falls back to
    the mean of all observations, and EI never points at it). The product
    lets the best setting change with the loss, as the paper's model
    intends: with the sum alone, the mean is F(setting) + G(loss), the same
    ranking at every loss.

    With ``speed_prior``, the GP's first guess is the speed model fitted to
    every job's observations (:class:`~tfonline.tuner.speed.SpeedPrior`),
    when it predicts settings left out of its fit; the GP's output is then log t
    less that guess, at each observation's job's scale, and predictions add
    the guess back at this job's scale. A setting never tried is then
    predicted from the model, not from the mean of all observations.

    EI is computed on log R̂ and converted to seconds at the current loss:
    an expected improvement Δ of log R̂ is worth ``R̂_cur·(1 − e^−Δ)``
    seconds, with R̂_cur the predicted R̂ of the current setting. That is
    what is compared with a reconfiguration's cost (see :meth:`suggest`).
    """

    def __init__(self, space: KnobSpace, seed: int = 0, speed_prior: bool = False):
        if not space.free:
            raise ValueError("the space has no free knob")
        self.space = space
        self.seed = seed
        self.speed_prior = speed_prior
        self._latest_fit: tuple[tuple, np.ndarray] | None = None  # the kernel's form and all hyperparameters
        self._fit_n = 0  # how many observations the latest fit saw (0 for another job's)
        self._cold_n = 0  # how many the latest cold fit saw (WARM_GROWTH; 0: none yet in this job)
        self.grid = SettingGrid(space)  # every setting, encoded: kept between decisions

    def _domain(self, observations: Sequence[Observation], loss: float) -> list[dict[str, Any]]:
        losses = [o.loss for o in observations] + [loss]
        low, high = min(losses), max(losses)
        pad = max(1e-6, 0.05 * (high - low))
        far = max(o.distance for o in observations)
        return self.space.gpyopt_domain() + [
            {"name": "loss", "type": "continuous", "domain": (max(0.0, low - pad), high + pad)}] + (
            [{"name": "job", "type": "continuous", "domain": (0.0, far)}] if far > 0 else [])

    def _constraints(self) -> list[dict[str, str]] | None:
        free = self.space.free
        n = self.space.nodes_alive
        if "ps" in free and "worker" in free:
            return [{"name": "nodes", "constraint": f"x[:,{free.index('ps')}] + x[:,{free.index('worker')}] - {n}"}]
        for name, other in (("ps", "worker"), ("worker", "ps")):
            if name in free:
                fixed = self.space.values[other][0]
                return [{"name": "nodes", "constraint": f"x[:,{free.index(name)}] + {fixed} - {n}"}]
        return None

    @property
    def latest_fit(self) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
        """The latest fit's kernel form (its parameters' names) and hyperparameters (all of the GP's), or None."""
        if self._latest_fit is None:
            return None
        return tuple(self._latest_fit[0]), tuple(float(v) for v in self._latest_fit[1])

    def adopt(self, form: Sequence[str], values: Sequence[float]) -> None:
        """Takes another GP's fit (an earlier job's, :mod:`tfonline.tuner.inherit`) as the latest: a fit with
        ``refit`` False uses it when its kernel has that form (this job's first refit is cold)."""
        self._latest_fit, self._fit_n, self._cold_n = (tuple(form), np.array(values, dtype=float)), 0, 0

    @property
    def blind(self) -> bool:
        """Whether the latest fit is blind to the setting (:data:`BLIND`): it predicts every setting alike."""
        if self._latest_fit is None:
            return False
        variance = {tuple(name.split(".")[-2:]): v for name, v in zip(*self._latest_fit)}
        share = [variance.get((part, "variance"), 0.0) for part in ("setting", "setting_by_loss", "loss_by_setting")]
        return share[0] + share[1] * share[2] < BLIND

    def prior(self, observations: Sequence[Observation]) -> SpeedPrior | None:
        """The speed model fitted to the observations of every job, as the GP's first guess (None: not asked
        for, or none fits)."""
        if not self.speed_prior:
            return None
        return SpeedPrior.fit([o.setting for o in observations], [max(o.per_iteration_s, 1e-12) for o in observations],
                              [o.job for o in observations], self.space.cores)

    def _model(self, observations: Sequence[Observation], loss: float, prior: SpeedPrior | None):
        gpyopt = _import()
        jobs = inherited(observations)
        x = np.array([self.space.encode(o.setting) + [o.loss] + ([o.distance] if jobs else []) for o in observations],
                     dtype=float)
        y = np.log(np.array([[max(o.per_iteration_s, 1e-12)] for o in observations], dtype=float))
        if prior is not None:  # the GP learns what the speed model misses
            y = y - prior.log_seconds([o.setting for o in observations], [o.job for o in observations])[:, None]
        domain = self._domain(observations, loss)
        # The model's columns: a nominal knob's one-hot columns each, then the loss (and the job's distance).
        width = gpyopt.core.task.space.Design_space(domain).model_dimensionality - jobs
        gpy = gpyopt.models.gpmodel.GPy
        knobs = list(range(width - 1))
        kernel = (gpy.kern.Matern52(width - 1, active_dims=knobs, ARD=True, name="setting")
                  + gpy.kern.Matern52(1, active_dims=[width - 1], name="loss")
                  + gpy.kern.Matern52(width - 1, active_dims=knobs, ARD=True, name="setting_by_loss")
                  * gpy.kern.Matern52(1, active_dims=[width - 1], name="loss_by_setting"))
        if jobs:  # how far another job's times carry over (a product), and by how much its level differs (a sum)
            kernel = (kernel * gpy.kern.Matern52(1, active_dims=[width], name="job")
                      + gpy.kern.Matern52(1, active_dims=[width], name="job_level"))
        bo = gpyopt.methods.BayesianOptimization(
            f=None, domain=domain, constraints=self._constraints(), X=x, Y=y, kernel=kernel,
            acquisition_type="EI", normalize_Y=True, exact_feval=False, de_duplication=False,
            optimize_restarts=GP_FIT_RESTARTS, max_iters=GP_FIT_ITERATIONS)
        return bo, y

    def _fitted(self, observations: Sequence[Observation], loss: float, prior: SpeedPrior | None, refit: bool,
                seen: int):
        """The model of :meth:`_model`, fitted as GPyOpt's ``suggest_next_locations`` fits it (cold), or from
        the hyperparameters of the latest fit of a kernel of the same form (see :meth:`fit`): once refitted
        from them (warm, :data:`WARM_GROWTH`), or, unless ``refit``, only given them, if that fit was not
        :attr:`blind` or saw as many observations as ``seen``. Returns (bo, y, whether its hyperparameters
        were fitted)."""
        bo, y = self._model(observations, loss, prior)
        bo.context, bo.model_parameters_iterations, bo.num_acquisitions = None, None, 0
        form = tuple(bo.model.kernel.parameter_names_flat())  # GPyOpt makes the GPy model from it in _update_model
        same = self._latest_fit is not None and self._latest_fit[0] == form and not (self.blind and seen > self._fit_n)
        if not same or (refit and (seen >= WARM_GROWTH * self._cold_n or self._cold_n < WARM_FROM)):
            bo._update_model(bo.normalization_type)
            self._latest_fit, self._fit_n, self._cold_n = (form, bo.model.model.param_array.copy()), seen, seen
            return bo, y, True
        max_iters, bo.model.max_iters = bo.model.max_iters, 0
        try:
            bo._update_model(bo.normalization_type)
            bo.model.model[:] = self._latest_fit[1]
            if refit:  # one L-BFGS start, from there
                bo.model.model.optimize_restarts(num_restarts=1, optimizer=bo.model.optimizer, max_iters=max_iters,
                                                 verbose=False)
                self._latest_fit, self._fit_n = (form, bo.model.model.param_array.copy()), seen
        except np.linalg.LinAlgError:  # not positive definite on today's observations (seen once, in a sweep)
            self._cold_n = 0
            return self._fitted(observations, loss, prior, True, seen)
        return bo, y, refit

    def fit(self, observations: Sequence[Observation], loss: float, current: dict[str, Any],
            iterations_left: float = 1.0, speed: SpeedOf | None = None, refit: bool = True) -> "Fitted":
        """The GP fitted to ``observations`` (the latest :data:`MAX_OBSERVATIONS`, see :func:`window`), read at
        ``loss`` against ``current``. Run it inside :func:`_contained` (as :meth:`suggest` does) for a
        seeded fit.

        Fitting the kernel's hyperparameters (L-BFGS, :data:`GP_FIT_RESTARTS` starts) is nearly all of a
        decision's cost: 0.6-2.4 s of CPU on the sweep benchmark's CNN jobs, against 0.1-0.2 s for the rest
        (conditioning on the observations, and EI over every setting). With ``refit`` False the GP takes
        the hyperparameters of the latest fit instead, when its kernel has the same form (the same knobs,
        and a job column or not), and is only conditioned on today's observations
        (:attr:`Fitted.refitted` says which). The tuning loop refits as often as its overhead share pays
        for (:meth:`~tfonline.tuner.budget.OverheadBudget.refit_due`), and a fit :attr:`blind` to the setting
        is refitted once there are more observations than it saw, whatever ``refit`` says.
        """
        if len(observations) < 2:
            raise ValueError(f"the GP needs at least 2 observations, got {len(observations)}")
        prior = self.prior(observations)  # from every observation, not only the GP's window
        seen, observations = len(observations), window(observations)
        bo, y, refitted = self._fitted(observations, loss, prior, refit, seen)
        return Fitted(self, bo, y, observations, loss, current, iterations_left, speed, prior, refitted)

    def fit_seeded(self, observations: Sequence[Observation], loss: float, current: dict[str, Any],
                   refit: bool = True) -> "Fitted":
        """:meth:`fit`, seeded as :meth:`suggest` is (the same observations give the same fit)."""
        with _contained(self.seed, len(window(observations))):
            return self.fit(observations, loss, current, refit=refit)

    def suggest(self, observations: Sequence[Observation], loss: float, current: dict[str, Any],
                hold: Sequence[str] = (), iterations_left: float = 1.0, speed: SpeedOf | None = None,
                refit: bool = True, margin: float = 0.0) -> Suggestion:
        """The setting s* with the largest EI over ``current`` at ``loss``, and that EI in seconds.

        A setting's remaining time is R̂ = t × N / ρ: its time per
        iteration ``t`` (the GP, over setting and loss), the job's curve's
        ``iterations_left`` N, and its convergence speed ρ (``speed``, a
        :class:`SpeedOf`; none: every setting converges alike). log R̂ is
        then normal with the GP's mean and variance of log t, less the mean
        of log ρ, plus its variance; two settings that share a speed key
        share ρ, and its uncertainty cancels between them.

        EI is the gain of *switching*, beyond ``margin``: E[max(log R̂(current) − log R̂(s) − margin, 0)] at
        ``loss``, in seconds ``R̂_cur·(1 − e^−EI)``, with the GP's variance of the difference of log t alone:
        exploring is worth what one segment can teach, and a segment measures its time per iteration well but
        its convergence speed hardly (its slope's standard error is about its size on the test surface); with
        the speeds' variance in, EI between two worker counts never fell, and the job explored the same two
        settings turn about. The speeds' variance counts in each prediction's confidence (:class:`Prediction`),
        which decides an exploit. After the random phase, or when the job's best setting was seen earlier, the
        current setting is not the incumbent, and EI against the incumbent would understate what a switch
        gains. The manager's ``margin`` is one segment's noise (:func:`~tfonline.tuner.recheck.segment_noise`):
        a gain within it is one that a segment run to learn it cannot show.

        ``hold``: free knobs to hold at their current values for a second
        candidate (GPyOpt's ``context``), e.g. XLA's level while it is off.
        s* often lies where one costly knob changes, and a gate that
        refuses it every time would leave the cheap knobs unexplored.
        """
        held = {name: self.space.encode_value(name, current[name]) for name in hold if name in self.space.free}
        with _contained(self.seed, len(window(observations))):
            model = self.fit(observations, loss, current, iterations_left, speed, refit)
            model.incumbent = model.current_mean - margin
            suggested = model.maximise_each([{}, held] if held else [{}])
            seen = {setting_key(current): current}
            for o in model.observations:
                seen.setdefault(setting_key(o.setting), o.setting)
            known = [s for key, s in seen.items() if key != setting_key(current) and self.space.fits(s)]
            settings = [current] + suggested + known
            mean, latent, speeds = model.predict(settings)
            cov = latent + speeds
        predictions = [against(s, mean[i], mean[0], cov[0, 0] + cov[i, i] - 2 * cov[0, i])
                       for i, s in enumerate(settings) if i > 0]
        current_s = seconds(mean[0])
        candidates = []
        for i, setting in enumerate(suggested, start=1):
            sd = math.sqrt(max(latent[0, 0] + latent[i, i] - 2 * latent[0, i], 0.0))
            gain = expected_improvement(mean[0] - margin, mean[i], sd)
            candidates.append(Candidate(setting, current_s * (1 - math.exp(-gain)), predictions[i - 1]))
        best_known = min(predictions[len(suggested):], key=lambda p: p.remaining_s, default=None)
        return Suggestion(candidates, current_s, best_known, model.refitted)


@dataclass(frozen=True)
class SpeedOf:
    """Convergence speeds as the GP reads them: the knobs a speed depends on, and the mean and variance of
    log ρ for a tuple of their values (see :class:`tfonline.tuner.convergence.Speeds`)."""

    names: tuple[str, ...]
    log: Any  # Callable[[tuple], tuple[float, float]]


class Fitted:
    """A fitted GP, read at one loss against the current setting: predictions of log R̂ and EI over settings."""

    def __init__(self, optimizer: GPOptimizer, bo, y: np.ndarray, observations: Sequence[Observation], loss: float,
                 current: dict[str, Any], iterations_left: float, speed: SpeedOf | None,
                 prior: SpeedPrior | None = None, refitted: bool = True):
        self.optimizer, self.space, self.bo, self.y, self.prior = optimizer, optimizer.space, bo, y, prior
        self.refitted = refitted  # its hyperparameters were fitted to these observations (GPOptimizer.fit)
        self.observations, self.loss, self.speed = list(observations), float(loss), speed
        self.context = [self.loss] + ([0.0] if inherited(observations) else [])  # predictions are for this job
        self.offset = math.log(max(iterations_left, 1e-12))
        self.current_key = self._keys([current])[0]
        mean, var = self._latent(np.array([self.space.encode(current)], dtype=float))
        speed_mean, _ = self._speeds([self.current_key])
        self.current_mean = float(mean[0] - speed_mean[0])
        self.incumbent = self.current_mean  # what EI is taken against (GPOptimizer.suggest's margin lowers it)

    def _keys(self, settings: Sequence[dict[str, Any]]) -> list[tuple]:
        names = self.speed.names if self.speed is not None else ()
        return [tuple(s.get(name) for name in names) for s in settings]

    def _speeds(self, keys: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray]:
        if self.speed is None:
            return np.zeros(len(keys)), np.zeros(len(keys))
        logs = {key: self.speed.log(key) for key in set(keys)}
        return np.array([logs[k][0] for k in keys], dtype=float), np.array([logs[k][1] for k in keys], dtype=float)

    def _speeds_of_grid(self, grid: np.ndarray) -> np.ndarray:
        """The mean log ρ of each row of encoded settings (0 without speeds)."""
        if self.speed is None:
            return np.zeros(len(grid))
        keys, inverse = self.optimizer.grid.values_of(grid, self.speed.names)
        return self._speeds(keys)[0][inverse]

    def _prior_of_grid(self, grid: np.ndarray) -> np.ndarray:
        """The prior's log time per iteration of each row of encoded settings (0 without a prior)."""
        if self.prior is None:
            return np.zeros(len(grid))
        values, inverse = self.optimizer.grid.values_of(grid, MODEL_KNOBS)
        return np.asarray(self.prior.log_seconds([dict(zip(MODEL_KNOBS, v)) for v in values]))[inverse]

    def _latent(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The GP's mean and variance of log t (measurement noise left out) at encoded settings, plus log N."""
        x = np.column_stack([grid] + [np.full(len(grid), value) for value in self.context])
        columns = []
        for k, variable in enumerate(self.bo.space.space_expanded):  # GPyOpt's unzip_inputs, without its loop
            if variable.type == "categorical":
                columns.append((x[:, [k]].astype(int) == np.arange(variable.dimensionality_in_model)).astype(float))
            else:
                columns.append(x[:, [k]])
        mean, var = self.bo.model.predict(np.hstack(columns), with_noise=False)
        scale = float(np.std(self.y)) or 1.0
        mean = np.ravel(mean) * scale + float(np.mean(self.y)) + self.offset + self._prior_of_grid(grid)
        return mean, np.ravel(var) * scale * scale

    def scores(self, grid: np.ndarray) -> np.ndarray:
        """−EI over the current setting (lower is better) of encoded settings: E[max(:attr:`incumbent` −
        log R̂(s), 0)] with the GP's variance of log t (see :meth:`GPOptimizer.suggest`)."""
        mean, var = self._latent(grid)
        sd = np.sqrt(np.maximum(var, 0.0))
        return -expected_improvements(self.incumbent, mean - self._speeds_of_grid(grid), sd)

    def predict(self, settings: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The means of log R̂ (seconds) of settings, and its covariance in two parts: the GP's, of log t
        (measurement noise left out), and the speeds' (settings of one speed key share theirs). Their sum
        is log R̂'s covariance.

        A switch gains what the setting's true R̂ is better by; the noise of
        one segment's measurement is not something a switch can win. With
        the noise in, EI between two equally good settings was about 0.4 ×
        the noise SD × R̂, more than a cheap switch's cost, and the job hopped
        between settings that differ in nothing that matters.
        """
        zipped = np.array([self.space.encode(s) + self.context for s in settings], dtype=float)
        inputs = self.bo.space.unzip_inputs(zipped)
        mean, _ = self.bo.model.predict(inputs, with_noise=False)
        cov = np.atleast_2d(self.bo.model.predict_covariance(inputs, with_noise=False))
        scale = float(np.std(self.y)) or 1.0
        mean, cov = np.ravel(mean) * scale + float(np.mean(self.y)) + self.offset, cov * scale * scale
        if self.prior is not None:
            mean = mean + self.prior.log_seconds(settings)
        keys = self._keys(settings)
        speed_mean, speed_var = self._speeds(keys)
        same = np.array([[a == b for b in keys] for a in keys], dtype=float)
        return mean - speed_mean, cov, same * speed_var[:, None]

    def seconds(self, settings: Sequence[dict[str, Any]]) -> np.ndarray:
        """The GP's mean time per iteration of ``settings`` at its loss (the exp of its mean log t; the mean
        alone, as :meth:`scores` reads it), for a fit made without ``iterations_left``."""
        return np.exp(self._latent(np.array([self.space.encode(s) for s in settings], dtype=float))[0])

    def maximise(self, held: dict[str, float]) -> dict[str, Any]:
        """The setting with the largest EI (:meth:`scores`), the ``held`` knobs fixed (encoded values): see
        :meth:`maximise_each`."""
        return self.maximise_each([held])[0]

    def maximise_each(self, helds: Sequence[dict[str, float]]) -> list[dict[str, Any]]:
        """For each of ``helds``, the setting with the largest EI (:meth:`scores`), those knobs fixed
        (encoded values).

        The loss is the context, as in GPyOpt's ``suggest_next_locations(context=...)``.
        Every knob is discrete, so EI is maximised over the settings
        themselves: all of them when the space has at most
        :data:`ENUMERATE_AT_MOST` (16,128 on a 4-node, 2-core cluster), else
        as many random ones and then a climb, one knob at a time, from the best
        :data:`CLIMB_FROM` of them. GPyOpt's own optimiser relaxes the knobs to
        reals, runs L-BFGS from 5 anchor points and rounds the result: 4-6 s
        per suggestion with 7 observations on this machine (its gradient of
        the kernel dominates), and a rounded optimum of the relaxation need not
        be the best setting. The settings are scored once for all ``helds``
        when they are enumerated: those with knobs held are rows of the grid
        of all, which the optimizer keeps between decisions.
        """
        free = self.space.free
        every = [sorted({self.space.encode_value(name, v) for v in self.space.values[name]}) for name in free]
        if math.prod(len(c) for c in every) <= ENUMERATE_AT_MOST:
            grid = self.optimizer.grid.rows(every)
            scores = self.scores(grid)
            chosen = []
            for held in helds:
                rows = np.ones(len(grid), dtype=bool)
                for name, code in held.items():
                    rows &= grid[:, free.index(name)] == code
                chosen.append(self.space.decode(grid[np.flatnonzero(rows)[int(np.argmin(scores[rows]))]]))
            return chosen
        return [self._sampled(held, every) for held in helds]

    def _sampled(self, held: dict[str, float], every: list[list[float]]) -> dict[str, Any]:
        """The best of :data:`ENUMERATE_AT_MOST` random settings and of a climb from the best few."""
        choices = [[held[name]] if name in held else codes for name, codes in zip(self.space.free, every)]
        rng = np.random.default_rng(np.random.randint(2**31))  # the global generator is seeded by _contained
        grid = np.column_stack([rng.choice(c, ENUMERATE_AT_MOST) for c in choices])
        grid = grid[feasible(self.space, grid)]
        scores = self.scores(grid)
        climbs = [self._climb(grid[i], float(scores[i]), choices) for i in np.argsort(scores, kind="stable")[:CLIMB_FROM]]
        return self.space.decode(min(climbs, key=lambda climb: climb[1])[0])

    def _climb(self, x: np.ndarray, score: float, choices: list[list[float]]) -> tuple[np.ndarray, float]:
        """Moves to the best setting that differs from ``x`` in one knob while that improves the score."""
        while True:
            neighbours = []
            for j, codes in enumerate(choices):
                for code in codes:
                    if code != x[j]:
                        neighbour = x.copy()
                        neighbour[j] = code
                        neighbours.append(neighbour)
            if not neighbours:
                return x, score
            grid = np.array(neighbours)
            grid = grid[feasible(self.space, grid)]
            if not len(grid):
                return x, score
            scores = self.scores(grid)
            i = int(np.argmin(scores))
            if not scores[i] < score:
                return x, score
            x, score = grid[i], float(scores[i])
