"""What a new user does first, run by .ci/check-wheel in a fresh environment with the built wheel.

    python smoke_job.py DB MODEL_DIR

Trains a small tuned logistic regression on generated data on the embedded
local cluster, restores the model it kept, runs the job again with a
scheduled switch of parameter servers and workers (an online switch), and
exits 0 only if all of it worked with the installed package (not the source
tree).
"""

import os
import sys

import tensorflow as tf

import tfonline
from tfonline import MLJobFramework
from tfonline.data import hashed_sparse_dataset


class SmokeLogR(MLJobFramework):
    target_loss = 0.45
    max_seconds = 60
    smoothing_window = 10

    def input_fn(self, shard, num_shards):
        return hashed_sparse_dataset(shard, num_shards, batch_size=32, fields=8, categories_per_field=50,
                                     hash_bits=12, signal=3.0)

    def model_fn(self, features, labels):
        indices, values = features
        w = tf.compat.v1.get_variable("w", [1 << 12, 1], initializer=tf.compat.v1.zeros_initializer())
        b = tf.Variable(0.0, name="b")
        logits = tf.reduce_sum(tf.nn.embedding_lookup(w, indices)[..., 0] * values, axis=1) + b
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(0.5)


def main(db: str, model_dir: str) -> int:
    here = os.path.dirname(os.path.abspath(tfonline.__file__))
    if not here.startswith(sys.prefix):
        print(f"smoke: tfonline came from {here}, not from the environment {sys.prefix}", file=sys.stderr)
        return 1
    result = SmokeLogR().run(tune=True, db=db, model_dir=model_dir, quiet=True,
                             tuning={"min_segment_s": 0.5, "random_settings": 2})
    print(f"smoke: {result.status} after {result.iterations} iterations in {result.completion_time_s:.1f} s, "
          f"final loss {result.final_loss}, TensorFlow {tf.__version__}, checkpoint {result.checkpoint}")
    if result.iterations < 1 or not result.checkpoint:
        return 1
    restored = SmokeLogR().restore(result.checkpoint)
    print(f"smoke: restored {len(restored.variables)} variables")
    if not restored.variables:
        return 1
    switched = SmokeLogR().run(setting={"ps": 1, "worker": 1}, schedule=[(100, {"ps": 2, "worker": 2})],
                               max_steps=300, db=db, model_dir=model_dir, quiet=True)
    print(f"smoke: a scheduled switch to ps2 w2: {switched.status} after {switched.iterations} iterations")
    return 0 if switched.iterations == 300 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
