"""The training graph of one setting: partitions on ps nodes, a replica per worker.

Between-graph replication, as TensorFlow's PS training has always done it:
every worker gets its own ``tf.Graph`` with one call of the user's
``model_fn`` on the worker's device and the parameters on the ps devices;
the graphs name the same variables, so they share them on the servers.

Variables created in ``model_fn`` are intercepted twice: a variable-scope
*partitioner* cuts large ``get_variable`` variables into one row block per
ps node (named after the cut, see :func:`tfonline.placement.block_name`),
and a *variable creator* puts each created variable (whole, or one block)
on the ps node the placement map gives it. Users write ordinary TF code.

Everything a job creates lives in one resource container, so a job's state
can be dropped from long-lived servers without touching other jobs.
"""

from __future__ import annotations

import inspect
import itertools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from tfonline._initial import setting_free
from tfonline.exceptions import JobDefinitionError
from tfonline.placement import Partition, block_name, row_ranges, shards_for

GLOBAL_STEP_NAME = "tfonline_global_step"
ODMR_LOCK_NAME = "tfonline_odmr_lock"  # one per destination node, in the job's container


def node_device(index: int) -> str:
    return f"/job:node/task:{index}/device:CPU:0"


@dataclass(frozen=True)
class Layout:
    """Which nodes are ps and which are workers under one setting."""

    ps_nodes: tuple[int, ...]
    worker_nodes: tuple[int, ...]

    @classmethod
    def from_setting(cls, setting: dict[str, Any], pool: list[int] | None = None) -> Layout:
        """The ps nodes first, then the workers, from the front of ``pool`` (the cluster's nodes in use; every
        node, in order, when None)."""
        ps, workers = setting["ps"], setting["worker"]
        nodes = list(range(ps + workers)) if pool is None else list(pool)
        if ps + workers > len(nodes):
            raise ValueError(f"a setting of ps {ps} and worker {workers} needs {ps + workers} nodes; "
                             f"{len(nodes)} are in use")
        return cls(tuple(nodes[:ps]), tuple(nodes[ps:ps + workers]))


@dataclass
class PartitioningRule:
    partition_count: int
    min_bytes: int

    def __call__(self, shape, dtype):
        dims = tf.TensorShape(shape).as_list()
        shards = shards_for(tuple(dims), tf.as_dtype(dtype).size, self.partition_count, self.min_bytes)
        return [shards] + [1] * (len(dims) - 1)

    def custom_getter(self, getter, name, *args, **kwargs):
        """Partitions a ``get_variable`` variable only when it is large.

        A scope-wide partitioner would turn every variable, however small,
        into a ``PartitionedVariable``, on which plain arithmetic such as
        ``w * x`` fails. A partitioner the user set is left alone. The
        initial value is the same under every cut (:mod:`tfonline._initial`).
        """
        kwargs["initializer"] = setting_free(kwargs.get("initializer"), name, kwargs.get("dtype"))
        shape = tf.TensorShape(kwargs.get("shape"))
        if kwargs.get("partitioner") is None and shape.is_fully_defined():
            dtype = tf.as_dtype(kwargs.get("dtype") or tf.float32)
            if self(shape, dtype)[0] > 1:
                kwargs["partitioner"] = self
                with tf.compat.v1.variable_creator_scope(self._name_block):
                    return getter(name, *args, **kwargs)
        return getter(name, *args, **kwargs)

    def _name_block(self, next_creator, **kwargs):
        """Names each block after the cut (innermost creator: the placing creator sees the new name)."""
        kwargs["name"] = block_name(kwargs["name"], self.partition_count)
        return next_creator(**kwargs)


@dataclass
class WorkerGraph:
    """One worker's graph and the tensors the driver runs."""

    graph: tf.Graph
    worker_node: int
    loss: tf.Tensor
    train_op: tf.Operation  # async: compute and apply; sync: compute and accumulate
    apply_op: tf.Operation | None  # sync only, run by the chief after every worker accumulated
    init_op: tf.Operation  # the job's variables (run once, by the chief)
    local_init_op: tf.Operation  # this worker's input iterator
    global_step: tf.Variable
    model_variables: list = field(default_factory=list)
    # Every global variable (model, optimizer slots, global step) by name,
    # with a placeholder and an assign op each, to carry values across a
    # rebuild of the graphs (the simplest reconfiguration).
    variables: dict[str, tf.Variable] = field(default_factory=dict)
    restore_feeds: dict[str, tf.Tensor] = field(default_factory=dict)
    restore_ops: dict[str, tf.Operation] = field(default_factory=dict)
    # Reads one number of every variable on its own device: a cheap round
    # trip from this worker to every ps node, safe to repeat.
    probe_op: tf.Operation | None = None
    # Fed with local_init_op: how many of this worker's batches to skip.
    skip: tf.Tensor | None = None
    saver: tf.compat.v1.train.Saver | None = None  # reconfig="checkpoint" only
    # A transition graph's (see build_worker_graph's lazy_moves): creates every moved variable that is
    # not created yet from its old location; a no-op once all are.
    ensure_op: tf.Operation | None = None
    old_devices: tuple[str, ...] = ()  # where the moved variables come from (sessions must see them)


def _check_loss(loss: Any) -> None:
    if not isinstance(loss, tf.Tensor):
        raise JobDefinitionError(f"model_fn must return a scalar float loss tensor, got {type(loss).__name__}")
    if loss.shape.rank != 0 or not loss.dtype.is_floating:
        raise JobDefinitionError(
            f"model_fn must return a scalar float loss tensor, got shape {tuple(loss.shape.as_list() or ())} "
            f"dtype {loss.dtype.name}"
        )


def check_dataset(dataset: Any, what: str) -> tf.data.Dataset:
    """``dataset``, returned by the job's method ``what``, if it is a Dataset of (features, labels) pairs."""
    if not isinstance(dataset, tf.data.Dataset):
        raise JobDefinitionError(
            f"{what} must return a tf.data.Dataset of (features, labels), got {type(dataset).__name__}"
        )
    element = dataset.element_spec
    if not isinstance(element, (tuple, list)) or len(element) != 2:
        if isinstance(element, (tuple, list)):
            got = f"tuples of {len(element)}"
        else:
            got = "single tensors" if isinstance(element, tf.TensorSpec) else type(element).__name__
        raise JobDefinitionError(f"{what}'s dataset must yield (features, labels) pairs, got {got}")
    return dataset


def without_autotune(dataset):
    """``dataset`` with tf.data's autotuning off, unless its own options turn it on.

    An iterator with autotuning on runs a model thread that sleeps between
    optimisations, longer and longer (up to a minute), and destroying the
    iterator waits for that sleep to end. Resetting a finished job's
    container on a node destroys its input iterators: measured, a reset
    after 25 s of reading waited 16 s with autotuning, 0 s without; in a
    CNN sweep it held the next job's start for up to 47 s (NOTES.md,
    2026-11-24). tfonline's own datasets have nothing to autotune; a
    user's ``tf.data.AUTOTUNE`` parallelism gets tf.data's static default.
    """
    with warnings.catch_warnings():  # in graph mode, options() warns that it reads them the legacy way, as here
        warnings.simplefilter("ignore", UserWarning)
        chosen = dataset.options().autotune.enabled
    if chosen is not None:
        return dataset  # the user chose
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def takes_skip(job) -> bool:
    """Whether the job's ``input_fn`` skips batches itself: it has a ``skip`` parameter (see
    :class:`tfonline.MLJobFramework`)."""
    return "skip" in inspect.signature(job.input_fn).parameters


def input_iterator(job, shard: int, num_shards: int, shared_name: str | None = None, skip=None):
    """Shard ``shard`` of ``num_shards`` of the job's input, from ``skip`` batches on: (iterator, features,
    labels). An ``input_fn`` that takes ``skip`` is given it, and skips where it is cheap (before a costly
    ``map``: tf.data's own skip of the finished dataset makes every skipped batch)."""
    itself = skip is not None and takes_skip(job)
    made = job.input_fn(shard, num_shards, skip=skip) if itself else job.input_fn(shard, num_shards)
    dataset = without_autotune(check_dataset(made, "input_fn"))
    if skip is not None and not itself:
        dataset = dataset.skip(skip)
    # A shared name keeps the iterator, and its position, on the worker's
    # server across sessions: a session reopened with a new ConfigProto
    # reads on where the old one stopped.
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset, shared_name=shared_name)
    features, labels = iterator.get_next()
    return iterator, features, labels


def build_model(job, features, labels, rule: PartitioningRule, creator, fn=None):
    """``model_fn``'s loss (checked), or what ``fn`` returns, built with the cut's blocks and ``creator``."""
    scope = tf.compat.v1.get_variable_scope()
    with tf.compat.v1.variable_creator_scope(creator):
        with tf.compat.v1.variable_scope(scope, custom_getter=rule.custom_getter, use_resource=True):
            out = (fn or job.model_fn)(features, labels)
    if fn is None:
        _check_loss(out)
    return out


def discover_partitions(job, rule: PartitioningRule, seed: int | None = None) -> list[Partition]:
    """Builds the model once, on no device, and lists its logical partitions.

    This also checks the job's methods return what they must, before any
    node is started.
    """
    graph = tf.Graph()
    created: list[Partition] = []

    def recording_creator(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        if not variable.shape.is_fully_defined():
            raise JobDefinitionError(
                f"variables must have a fully known shape, got {variable.shape} for {variable.name}"
            )
        shape = tuple(variable.shape.as_list())
        nbytes = variable.dtype.size
        for d in shape:
            nbytes *= d
        created.append(Partition(variable.name.split(":")[0], shape, variable.dtype.base_dtype.name, nbytes))
        return variable

    with graph.as_default():
        if seed is not None:
            tf.compat.v1.set_random_seed(seed)
        _, features, labels = input_iterator(job, 0, 1)
        loss = build_model(job, features, labels, rule, recording_creator)
        if not created:
            raise JobDefinitionError("model_fn must create at least one variable to train, got none")
        optimizer = job.optimizer_fn()
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise JobDefinitionError(
                f"optimizer_fn must return a tf.compat.v1.train.Optimizer, got {type(optimizer).__name__}"
            )
        gradients_of(optimizer, loss)
    return created


def gradients_of(optimizer, loss):
    grads_and_vars = [(g, v) for g, v in optimizer.compute_gradients(loss) if g is not None]
    if not grads_and_vars:
        raise JobDefinitionError("model_fn's loss must depend on at least one trainable variable, got none")
    return grads_and_vars


def _placing_creator(partitions: list[Partition], placement: list[int], ps_devices: list[str], created: list):
    """A variable creator that puts the i-th variable ``model_fn`` creates on its partition's ps (appended to
    ``created``), and checks that ``model_fn`` creates the same variables as when the partitions were found."""
    counter = itertools.count()

    def placing_creator(next_creator, **kwargs):
        index = next(counter)
        if index >= len(partitions):
            raise JobDefinitionError(
                f"model_fn must create the same variables on every call, got more than {len(partitions)}"
            )
        with tf.device(ps_devices[placement[index]]):
            variable = next_creator(**kwargs)
        if tuple(variable.shape.as_list()) != partitions[index].shape:
            raise JobDefinitionError(
                f"model_fn must create the same variables on every call, got {variable.name} with shape "
                f"{tuple(variable.shape.as_list())}, expected {partitions[index].shape}"
            )
        created.append(variable)
        return variable

    return placing_creator


def _driver_ops(variables: dict, worker_node: int):
    """What the driver runs on a worker's graph besides training: a feed and an assign per variable (to
    restore values it read), and a probe that reads a little of every variable (every channel it uses)."""
    restore_feeds, restore_ops = {}, {}
    for name, variable in variables.items():
        with tf.device(node_device(worker_node)):
            feed = tf.compat.v1.placeholder(variable.dtype.base_dtype, variable.shape, name=f"restore/{name}")
        with tf.device(variable.device):
            restore_ops[name] = variable.assign(feed, read_value=False)
        restore_feeds[name] = feed
    probes = []
    for variable in variables.values():
        with tf.device(variable.device):
            probes.append(tf.reshape(variable.read_value(), [-1])[:1])
    with tf.device(node_device(worker_node)):
        probe_op = tf.group(*[tf.identity(p) for p in probes], name="probe")
    return restore_feeds, restore_ops, probe_op


def build_worker_graph(
    job,
    layout: Layout,
    worker_rank: int,
    partitions: list[Partition],
    placement: list[int],
    rule: PartitioningRule,
    container: str,
    sync: bool,
    seed: int | None = None,
    saver: bool = False,
    lazy_moves: list[Move] | None = None,
) -> WorkerGraph:
    """The graph of worker ``worker_rank`` of ``layout`` (0 is the chief).

    With ``lazy_moves`` it is a *transition graph* (ODMR): every variable
    the new placement moved is created on its new node, at its first use,
    from its old location. Each moved variable's handle op waits for one
    op that, for every moved variable still uninitialised on its new node,
    reads it on the old node and assigns it on the new one (a conditional
    per variable); once they are all created that op does nothing. So the
    first step pulls the moved values from their old nodes and updates them
    where they now live; every later step is a normal one. The steady-state
    graph (the same call without ``lazy_moves``) has no conditional.

    The input iterator's initializer takes how many of its batches to skip
    (:attr:`WorkerGraph.skip`, fed when it is run): after a reconfiguration
    each worker skips its share of the batches the job has read, so the
    graph of a layout can be built once and reused.
    """
    graph = tf.Graph()
    ps_devices = [node_device(n) for n in layout.ps_nodes]
    worker_node = layout.worker_nodes[worker_rank]
    model_variables = []
    placing_creator = _placing_creator(partitions, placement, ps_devices, model_variables)

    with graph.as_default(), tf.compat.v1.container(container):
        if seed is not None:
            tf.compat.v1.set_random_seed(seed)
        with tf.device(ps_devices[0]):
            global_step = tf.compat.v1.get_variable(
                GLOBAL_STEP_NAME, [], tf.int64, tf.compat.v1.zeros_initializer(), trainable=False, use_resource=True
            )
        with tf.device(node_device(worker_node)):
            num_shards = len(layout.worker_nodes)
            shared_name = f"{container}_input_{worker_rank}_of_{num_shards}"
            skip = tf.compat.v1.placeholder_with_default(tf.constant(0, tf.int64), [], name="input_skip")
            iterator, features, labels = input_iterator(job, worker_rank, num_shards, shared_name, skip)
            loss = build_model(job, features, labels, rule, placing_creator)
            optimizer = job.optimizer_fn()
            grads_and_vars = gradients_of(optimizer, loss)
            apply_op = None
            if sync:
                train_op, apply_op = _sync_ops(optimizer, grads_and_vars, worker_rank, len(layout.worker_nodes),
                                               global_step, container)
            else:
                # The loss recorded at a step is read before the step's own update. A gradient that needs the
                # forward pass orders the two anyway; one that does not (a loss linear in its parameters)
                # let the update land first now and then, and the loss read one push ahead.
                with tf.control_dependencies([loss]):
                    train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
        init_op = tf.compat.v1.global_variables_initializer()
        local_init_op = iterator.initializer
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        restore_feeds, restore_ops, probe_op = _driver_ops(variables, worker_node)
        # The checkpoint-restart baseline's saver: each ps node writes its own variables.
        # A list, not a dict, so that a large variable's blocks are saved as slices of it (TensorFlow's
        # SaveSliceInfo) and restore into another cut.
        checkpoint = tf.compat.v1.train.Saver(list(variables.values()), sharded=True) if saver else None
        ensure_op = _lazy_creation(lazy_moves, variables, container) if lazy_moves else None
    graph.finalize()
    return WorkerGraph(
        graph, worker_node, loss, train_op, apply_op, init_op, local_init_op, global_step, model_variables,
        variables, restore_feeds, restore_ops, probe_op, skip, checkpoint, ensure_op,
        tuple(sorted({source.device for m in lazy_moves or () for source in m.sources})),
    )


@dataclass(frozen=True)
class Source:
    """A variable of the old setting that a moved variable's value comes from (all of it, or some rows)."""

    name: str  # its resource's shared name in the job's container
    shape: tuple[int, ...]
    device: str
    rows: tuple[int, int] | None = None  # [first, end) of its rows, when the new variable takes only those


@dataclass(frozen=True)
class Move:
    """One variable that the new setting has where the old one has not: moved to another node, or cut anew."""

    name: str  # its resource's shared name in the job's container
    dtype: tf.DType
    shape: tuple[int, ...]
    destination: str  # device
    sources: tuple[Source, ...]  # its value is theirs (their rows), joined in order

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.size


def variable_shapes(graph: WorkerGraph) -> dict[str, tuple[int, ...]]:
    """Every global variable of ``graph`` by name, with its shape."""
    return {name: _shape(v) for name, v in graph.variables.items()}


def moves_between(old: WorkerGraph, new: WorkerGraph) -> list[Move]:
    """The variables of ``new`` (the graphs of two layouts of one job) not in ``old`` where ``new`` puts them.

    A variable of both on another device comes from its old copy; a block
    of a new cut (the ps count changed) from the rows of the old cut's
    blocks that it covers.
    """
    old_blocks: dict[str, list[tuple[int, int, str]]] = {}
    for name, (key, start, stop) in row_ranges(variable_shapes(old)).items():
        old_blocks.setdefault(key, []).append((start, stop, name))
    moves = []
    for name, (key, start, stop) in row_ranges(variable_shapes(new)).items():
        variable = new.variables[name]
        if name in old.variables:
            was = old.variables[name]
            sources = () if was.device == variable.device else (Source(name, _shape(was), was.device),)
        else:
            sources = tuple(Source(n, _shape(old.variables[n]), old.variables[n].device,
                                   (max(start, a) - a, min(stop, b) - a))
                            for a, b, n in sorted(old_blocks[key]) if a < stop and b > start)
        if sources:
            moves.append(Move(name, variable.dtype.base_dtype, _shape(variable), variable.device, sources))
    return moves


def _shape(variable) -> tuple[int, ...]:
    return tuple(variable.shape.as_list())


def _handle(name: str, dtype: tf.DType, shape: tuple[int, ...], device: str, container: str) -> tf.Tensor:
    """A handle to variable ``name`` on ``device``, by its shared name in the job's container."""
    with tf.device(device):
        return tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, container=container, shared_name=name)


def _lock(node_device_: str, container: str) -> tf.Tensor:
    """The ODMR creation lock of one destination node (a mutex shared by every transition graph of the job)."""
    with tf.device(node_device_):
        return tf.raw_ops.MutexV2(container=container, shared_name=ODMR_LOCK_NAME)


def _lazy_creation(moves: list[Move], variables: dict[str, tf.Variable], container: str) -> tf.Operation:
    """The op that creates each moved variable from its old location if it is not created yet (see above).

    Workers switch at their own iteration boundary, so the first steps of
    two workers can both find a moved variable uncreated: the second
    creation would overwrite the first step's update with the old value.
    Each destination node's check-and-create runs under a lock on that
    node (TensorFlow's ``MutexLock``, which ``tf.CriticalSection`` is made
    of), so exactly one step creates each variable.
    """
    created = []
    by_node: dict[str, list[Move]] = {}
    for move in moves:
        by_node.setdefault(move.destination, []).append(move)
    for device, group in sorted(by_node.items()):
        with tf.device(device):
            lock = tf.raw_ops.MutexLock(mutex=_lock(device, container))
        creations = []
        for move in group:
            destination = _handle(move.name, move.dtype, move.shape, move.destination, container)

            def pull(move=move, destination=destination):
                parts = []
                for source in move.sources:
                    with tf.device(source.device):
                        value = tf.raw_ops.ReadVariableOp(
                            resource=_handle(source.name, move.dtype, source.shape, source.device, container),
                            dtype=move.dtype)
                        parts.append(value if source.rows is None else value[source.rows[0]:source.rows[1]])
                with tf.device(move.destination):
                    value = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
                    return tf.group(tf.raw_ops.AssignVariableOp(resource=destination, value=value))

            with tf.device(device), tf.control_dependencies([lock]):
                is_created = tf.raw_ops.VarIsInitializedOp(resource=destination)
            with tf.device(device):
                creations.append(tf.cond(is_created, tf.no_op, pull))
        with tf.device(device), tf.control_dependencies(creations):
            # Keeps the lock until every creation on the node is done; releasing it is the lock tensor's end.
            created.append(tf.raw_ops.ConsumeMutexLock(mutex_lock=lock))
    ensure = tf.group(*created, name="odmr_ensure")
    # Every op that uses a moved variable (reads in the model, the optimizer's
    # update, a slot's update) takes its handle: making the handle ops wait for
    # the creation orders all of them after it. TensorFlow offers no public
    # call to add a control input to an existing op.
    for move in moves:
        variables[move.name].handle.op._add_control_input(ensure)
    return ensure


def build_release_graph(moves: list[Move], container: str, others: list[tuple[Source, tf.DType]] = ()
                        ) -> tuple[tf.Graph, tf.Operation]:
    """A graph whose one op releases the sources of moved variables (once they all live at their new nodes),
    the creation locks, and ``others``: (variable, dtype) pairs the new setting no longer has."""
    graph = tf.Graph()
    with graph.as_default():
        released = []
        for source, dtype in [(source, m.dtype) for m in moves for source in m.sources] + list(others):
            with tf.device(source.device):
                released.append(tf.raw_ops.DestroyResourceOp(
                    resource=_handle(source.name, dtype, source.shape, source.device, container),
                    ignore_lookup_error=True))
        for device in sorted({move.destination for move in moves}):  # and the creation locks
            with tf.device(device):
                released.append(tf.raw_ops.DestroyResourceOp(resource=_lock(device, container),
                                                              ignore_lookup_error=True))
        op = tf.group(*released, name="release")
    graph.finalize()
    return graph, op


def _sync_ops(optimizer, grads_and_vars, worker_rank: int, worker_count: int, global_step, container: str):
    """Synchronous training as two phases around a barrier in the driver.

    Every worker adds its gradient into its own accumulator, which lives
    next to the variable; then the chief applies the mean of the workers'
    accumulators, summed in rank order, and clears them. The driver's
    barrier orders the phases, so one global step is one update made of
    every worker's gradient.

    One accumulator per worker, not one shared, makes a synchronous step
    exactly reproducible: floating-point addition is not associative, and
    workers adding their (sparse: many rows each) gradients into one
    accumulator in the order they happen to finish gave two runs of one job
    losses apart from step 7 (2 workers). A worker's accumulator is created
    (zero) at its first accumulation, not by the job's initialiser: it is
    not a model variable, so a switch has nothing to move or checkpoint.
    """
    accumulate, mean_grads, accumulators = [], [], []
    for grad, var in grads_and_vars:
        dtype, shape = var.dtype.base_dtype, tuple(var.shape.as_list())
        with tf.device(var.device):
            every = [_accumulator(var, rank, dtype, shape, container) for rank in range(worker_count)]
            mine = every[worker_rank]
            with tf.control_dependencies([_created(mine, dtype, shape)]):
                if isinstance(grad, tf.IndexedSlices):
                    accumulate.append(tf.raw_ops.ResourceScatterAdd(resource=mine, indices=grad.indices,
                                                                    updates=grad.values))
                else:
                    accumulate.append(tf.raw_ops.AssignAddVariableOp(resource=mine, value=grad))
            total = tf.add_n([tf.raw_ops.ReadVariableOp(resource=h, dtype=dtype) for h in every])
            mean_grads.append((total / worker_count, var))
            accumulators += [(h, dtype, shape, var.device) for h in every]
    train_op = tf.group(*accumulate)
    apply = optimizer.apply_gradients(mean_grads, global_step=global_step)
    clear = []
    for handle, dtype, shape, device in accumulators:
        with tf.device(device), tf.control_dependencies([apply]):
            clear.append(tf.raw_ops.AssignVariableOp(resource=handle, value=tf.zeros(shape, dtype)))
    return train_op, tf.group(*clear)


def accumulators_of(chief: WorkerGraph, worker_count: int) -> list[tuple[Source, tf.DType]]:
    """Every synchronous gradient accumulator a layout of ``worker_count`` workers may have made, as
    (variable, dtype) pairs for :func:`build_release_graph`: releasing them discards a step in flight."""
    return [(Source(_accumulator_name(var, rank), _shape(var), var.device), var.dtype.base_dtype)
            for var in chief.model_variables for rank in range(worker_count)]


def _accumulator(var, rank: int, dtype: tf.DType, shape: tuple[int, ...], container: str) -> tf.Tensor:
    """Worker ``rank``'s gradient accumulator of ``var`` (a handle, on ``var``'s device)."""
    return _handle(_accumulator_name(var, rank), dtype, shape, var.device, container)


def _accumulator_name(var, rank: int) -> str:
    return f"{var.op.name}/sync_accumulator_{rank}"


def _created(handle: tf.Tensor, dtype: tf.DType, shape: tuple[int, ...]) -> tf.Tensor:
    """Creates the accumulator ``handle`` (zero) unless it exists: only its own worker writes it."""
    return tf.cond(tf.raw_ops.VarIsInitializedOp(resource=handle), tf.no_op,
                   lambda: tf.group(tf.raw_ops.AssignVariableOp(resource=handle, value=tf.zeros(shape, dtype))))
