"""The worker threads: each runs its worker's training steps, one iteration after another.

An asynchronous job has one thread per worker; a synchronous job one
thread that runs every worker's step side by side, then the chief's apply.
Each iteration is taken on the steps published last (see
:class:`tfonline._state.TrainingState`) and recorded there. A worker stops
at its iteration's end when the job stops, when the monitor pauses the
workers for a switch, or when the new setting has no such worker.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import wait
from typing import Callable

import tensorflow as tf

from tfonline._calls import DaemonExecutor, essence, join_all, run_retrying_aborts
from tfonline._state import Stop, TrainingState
from tfonline.exceptions import DatasetExhaustedError, TfOnlineError

logger = logging.getLogger("tfonline")

# How long the workers have to end their iterations when they stop or pause, all together: a thread whose step
# has not ended by then is given up on (Workers.join).
JOIN_TIMEOUT_S = 30.0
# How many times in a row a worker opens its input again (Workers._reopened) before its error fails the job.
INPUT_REOPENS = 3


def input_cancelled(error: tf.errors.OpError) -> bool:
    """Whether ``error`` says a step's input iterator, or the ``map`` feeding it, was cancelled: TensorFlow
    then fails every later ``GetNext`` of that iterator ("Iterator was cancelled")."""
    return "Iterator was cancelled" in error.message or (
        "user-defined function" in error.message and "with iterator: Iterator::" in error.message)


class Workers:
    """The threads that train on ``state``'s steps.

    The thread table is guarded by the state's lock: a worker that ends
    because the new setting dropped it, and a switch that starts the new
    setting's workers, see one consistent table.
    """

    def __init__(self, state: TrainingState):
        self.state = state
        self.sync = state.sync
        self.pause = threading.Event()  # the workers stop at their iteration's end (a switch that pauses)
        self._threads: dict[int, threading.Thread] = {}
        self._abandoned: set[threading.Thread] = set()  # threads given up on: they touch nothing when they end

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def start(self) -> None:
        """Starts a thread for each worker that has none."""
        with self.state.lock:
            self.start_locked()

    def start_locked(self) -> None:
        """:meth:`start`, for a caller that holds the state's lock (a switch's publish)."""
        if self.state.stopped.is_set():
            return
        ranks = range(1) if self.sync else range(len(self.state.steps))
        for rank in ranks:
            if rank not in self._threads:
                loop, args, name = ((self._sync_loop, (), "tfonline-sync") if self.sync
                                    else (self._async_loop, (rank,), f"tfonline-worker-{rank}"))
                thread = threading.Thread(target=self._guard, args=(loop, *args), name=name, daemon=True)
                self._threads[rank] = thread
                thread.start()

    def join(self) -> None:
        """Waits for every worker to end its iteration, :data:`JOIN_TIMEOUT_S` at most in all.

        A worker whose step has not ended by then is given up on (:meth:`abandon`): whatever its step does
        after, it records nothing and fails nothing. A tuned LogR job's step once did not end for 30 s with
        every node alive; the switch went on, closed the sessions, and the step's "CancelledError: Session
        has been closed" failed the job (NOTES.md, thirty-fifth session).
        """
        with self.state.lock:
            threads = dict(self._threads)
        for rank, ended in zip(threads, join_all(threads.values(), JOIN_TIMEOUT_S)):
            if not ended:
                what = "the synchronous step" if self.sync else f"worker {rank}'s step"
                logger.warning("%s did not end within %.0f s; its thread is given up on (the step is cancelled "
                               "when its session closes)", what, JOIN_TIMEOUT_S)
                self.abandon(rank)
        with self.state.lock:
            self._threads.clear()

    def abandon(self, rank: int) -> None:
        """Gives up on worker ``rank``'s thread (sync: the one thread): its node is lost, and a step on a node
        that went silent may never return. Whatever the thread does after, it records nothing; a new thread
        takes the rank at the next :meth:`start`."""
        with self.state.lock:
            thread = self._threads.pop(rank, None)
            if thread is not None:
                self._abandoned.add(thread)
            if self.sync:  # the given-up thread may hold the gate for good
                self.state.step_gate = threading.Lock()
        self.state.off(rank)

    def abandon_all(self) -> None:
        """:meth:`abandon` for every running worker (the job goes back to a checkpoint)."""
        with self.state.lock:
            ranks = list(self._threads)
        for rank in ranks:
            self.abandon(rank)

    def _given_up(self) -> bool:
        return threading.current_thread() in self._abandoned

    def _going(self) -> bool:
        return not (self.state.stopped.is_set() or self.pause.is_set() or self._given_up())

    def _guard(self, loop, *args) -> None:
        state = self.state
        try:
            loop(*args)
        except BaseException as e:
            if not self._given_up():
                self._failed(e)

    def _failed(self, error: BaseException) -> None:
        state = self.state
        if isinstance(error, tf.errors.OutOfRangeError):
            message = (f"the dataset ended at step {state.step} before convergence: smoothed loss "
                       f"{state.smoothed.value:.4g} > target_loss {state.job.target_loss:g}; "
                       f"repeat it in input_fn (dataset.repeat()) or lower the target")
            state.request_stop(Stop("data_exhausted", message, DatasetExhaustedError(message)))
        elif isinstance(error, tf.errors.OpError):  # the monitor tells a lost node's from the job's end
            message = f"TensorFlow failed at step {state.step}: {type(error).__name__}: {essence(error.message)}"
            state.fail(Stop("failed", message, TfOnlineError(message)))
        elif isinstance(error, Stop):
            state.request_stop(error)
        else:  # a bug; fail the job, never hang it
            state.request_stop(Stop("failed", f"{type(error).__name__}: {error}", error))

    def _async_loop(self, rank: int) -> None:
        """Worker ``rank``'s iterations, each on the steps published last: a switch reaches it at its next
        iteration boundary, and a worker the new setting does not have ends there."""
        state = self.state

        def gone() -> None:  # the new setting has no such worker: this thread ends (under the state's lock)
            self._threads.pop(rank, None)

        reopened = 0  # the worker's input opened again since its last iteration
        try:
            while self._going():
                taken = state.step_for(rank, gone)
                if taken is None:
                    return
                step, generation, batches = taken
                started = time.perf_counter()
                try:
                    loss, _ = run_retrying_aborts(step)
                except tf.errors.CancelledError as e:
                    if reopened >= INPUT_REOPENS or not self._reopened(
                            rank, step, e, lambda: batches if generation == state.generation else None):
                        raise
                    reopened += 1
                    continue
                reopened = 0
                if self._given_up():
                    return
                state.record(rank, time.perf_counter() - started, float(loss), generation)
        finally:
            if not self._given_up():
                state.off(rank)

    def _reopened(self, rank: int, step, error, batches: Callable[[], int | None]) -> bool:
        """Whether worker ``rank``'s input, killed under its step (``error``), was opened again at its next
        batch: only while the step's setting is the job's and no switch opens the input (``batches()``: the
        batches the worker started since its input opened, this one too; None otherwise)."""
        if not input_cancelled(error) or self._given_up():
            return False
        started = batches()
        if started is None:
            return False
        logger.warning("worker %d's input was cancelled under its step (%s: %s); it is opened again at its next "
                       "batch, and the batch in flight is passed over", rank, type(error).__name__,
                       essence(error.message))
        step.reopen(started)
        return True

    def _sync_loss(self, rank: int, future, worker: DaemonExecutor, step, generation: int) -> float:
        """Worker ``rank``'s loss in a synchronous iteration of ``generation``. Where its input was killed
        under its step, the input is opened again at its next batch and the step run again: the lost batch
        gave no gradient, and the chief's apply averages one from every worker."""
        reopened = 0
        while True:
            try:
                return float(future.result()[0])
            except tf.errors.CancelledError as e:
                if reopened >= INPUT_REOPENS or not self._reopened(
                        rank, step, e, lambda: self.state.pass_over(rank, generation)):
                    raise
                reopened += 1
                future = worker.submit(step)

    def _sync_loop(self) -> None:
        """Every worker's step side by side, each in a daemon thread of its own (a step stuck on a node that
        went silent must not keep the process from exiting, as an executor's thread would), then the apply."""
        state = self.state
        pool: list[DaemonExecutor] = []
        try:
            while self._going():
                taken = state.sync_steps()
                if taken is None:  # held at a scheduled switch's step, until the switch pauses it
                    time.sleep(0.002)
                    continue
                steps, apply, generation = taken
                started = time.perf_counter()
                pool += [DaemonExecutor("tfonline-sync-worker") for _ in range(len(steps) - len(pool))]
                with state.step_gate:
                    futures = [worker.submit(step) for worker, step in zip(pool, steps)]
                    wait(futures)  # every step ends (a survivor's accumulation too) before an error is raised
                    losses = [self._sync_loss(rank, future, pool[rank], steps[rank], generation)
                              for rank, future in enumerate(futures)]
                    apply()
                    state.record(None, time.perf_counter() - started, sum(losses) / len(losses), generation)
        finally:
            for worker in pool:
                worker.shutdown(0.0)
            if not self._given_up():
                state.off(0)
