"""A variable's initial value: the same under every setting.

TensorFlow seeds an unseeded random op from the graph's seed and the op's
id, its place among the ops created before it. A setting moves that place:
under two ps nodes a large variable is cut into two row blocks
(:class:`tfonline._graph.PartitioningRule`), each with its own random op,
and every variable created after it comes later. So one job at one seed
began from other weights on one ps node than on two. On the benchmark's
CNN at seed 0, one worker needed 14,471 iterations to the target from one
ps node's start and 10,896 from two's (NOTES.md, forty-seventh session): a
gap no setting causes, that the fixed settings' completion times carried
and that a tuned job, which starts once, can never reach.

:func:`setting_free` gives each ``get_variable`` variable whose initializer
draws at random without a seed of its own a seed made of its name (which
TensorFlow joins to the graph's seed), and draws a row block's values as
those rows of the whole variable's: a variable starts from the same values
under every cut. Left as they are: a seed the user gave, an initializer
that draws nothing or is a plain function or a value, and a graph without
a seed (the user asked for a different start each run). Variables made
without ``get_variable`` (``tf.Variable``) are not cut, and keep
TensorFlow's seeding.
"""

from __future__ import annotations

import zlib
from typing import Any

import tensorflow as tf


def name_seed(name: str) -> int:
    """An op seed from a variable's name, the same in every process and every graph."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def setting_free(initializer: Any, name: str, dtype: Any) -> Any:
    """``initializer`` for the variable ``name``, seeded by that name and cut as rows of the whole variable's
    value; or ``initializer`` itself where that cannot be or must not be (see the module's docstring). ``None``
    is ``get_variable``'s own default for a float variable, Glorot's uniform draw."""
    if tf.compat.v1.get_default_graph().seed is None:
        return initializer
    if initializer is None:
        if not tf.as_dtype(dtype or tf.float32).is_floating:
            return None
        initializer = tf.compat.v1.glorot_uniform_initializer()
    elif isinstance(initializer, type):
        initializer = initializer()
    get_config = getattr(initializer, "get_config", None)
    config = get_config() if callable(initializer) and callable(get_config) else {}
    if config.get("seed", 0) is not None:  # draws nothing, or seeded by the user
        return initializer
    config = {key: value for key, value in config.items() if key != "dtype"}  # the call gives it
    whole = type(initializer).from_config({**config, "seed": name_seed(name)})

    def initial(shape, dtype=None, partition_info=None):
        if partition_info is None:
            return whole(shape, dtype=dtype)
        value = whole(partition_info.full_shape, dtype=dtype)
        return tf.slice(value, partition_info.var_offset, shape)

    return initial
