# Two commands do everything on a fresh machine:
#   make demo   set up .venv, run an example job with tuning on the embedded cluster, print its report
#               (and write it as demo-runs/report.html, with its plots in demo-runs/plots)
#   make test   set up .venv, run the whole test suite
# CI (.ci/run) also runs `make check-wheel`: the built wheel in a fresh environment (.ci/check-wheel).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_DB := demo-runs/demo.db

.PHONY: install browser demo test check-wheel bench bench-full clean

# tfonline installs no TensorFlow of its own (a user's environment has one): the [cpu] extra
# brings one here, [examples] the CNN's digits, [test] pytest, TensorBoard and build.
$(STAMP): setup.py pyproject.toml patches/bind_address.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[cpu,examples,test]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	mkdir -p demo-runs
	rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python examples/logr.py --db $(DEMO_DB) --tune --ps 3 --worker 1
	$(BIN)/tfonline report $(DEMO_DB) --html demo-runs/report.html --plots demo-runs/plots

# The report's HTML test opens the page in headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing Debian's chromium for the report's browser test"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 || \
	    echo "make: chromium could not be installed here; tests/test_report.py skips its browser check"; }

# Two pytest workers side by side (pytest-xdist; one alone leaves a third of the two cores idle, waiting on
# nodes), then the tests marked serial alone; both parts run, and either one failing fails make test.
TEST_WORKERS ?= 2
test: install browser
	@rc=0; \
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not serial" || rc=$$?; \
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -m serial || rc=$$?; \
	exit $$rc

# A wheel built from the tree, installed into a fresh venv with a TensorFlow (TENSORFLOW=... to pick one).
check-wheel: install
	PYTHON=$(PYTHON) BUILDER=$(BIN)/python .ci/check-wheel

# The paper's evaluation on this machine (benchmarks/paper.py): quick about 42 min, full a day or more;
# results and figures in benchmarks/results/<date>-<mode>.{md,json,png}. bench-full runs in sittings of
# about 150 minutes (benchmarks/journal.py): each goes on where the last stopped; run it until it says done.
BENCH_SITTING_MIN ?= 150
BENCH_ARGS ?=  # e.g. --accept-lost, "--redo svm" (deferred by its speed check), "--redo cnn/tuned": paper.py --help
bench: install
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python benchmarks/paper.py --mode quick

bench-full: install
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python benchmarks/paper.py --mode full --resume --stop-after $(BENCH_SITTING_MIN) $(BENCH_ARGS); \
	rc=$$?; if [ $$rc = 75 ]; then echo "bench-full: not done; run make bench-full again to go on"; exit 0; fi; exit $$rc

clean:
	rm -rf $(VENV) demo-runs *.egg-info build dist
