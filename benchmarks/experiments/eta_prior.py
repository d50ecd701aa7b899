"""The ETA's error with and without a job's earlier runs (:mod:`tfonline.estimator._prior`), on kept runs.

    python benchmarks/experiments/eta_prior.py benchmarks/results/<stem>-fixed.db [JOB_NAME ...]
    python benchmarks/experiments/eta_prior.py --journal benchmarks/results/<stem> [--set-aside] [--pooled]

A repository: each converged run of each job name (all when none is given),
oldest first, by what its ETA recorded as it ran, as Table VI rates the ETA
(:func:`from_estimates`). Reads only (an older repository must be upgraded
first: ``tfonline upgrade`` on a copy).

``--journal``: a full benchmark whose fixed runs' repository is gone with an
earlier machine, from the ratings its journal kept (:func:`from_journal`):
there the curve's answers are the estimators' ratings', fitted again on
segments of 60 iterations, for the runs rated and their calibration alike.
"""

from __future__ import annotations

import json
import re
import statistics
import sys

import numpy as np

from tfonline.estimator._prior import EarlierRun, Priors
from tfonline.estimator._quality import FRACTIONS, eta_errors, load_runs
from tfonline.repository import Repository



def _text(errors: dict) -> str:
    return " / ".join("-" if errors[f] is None else f"{errors[f]:.2f}" for f in FRACTIONS)


def _medians(rows: list[dict]) -> str:
    medians = {}
    for f in FRACTIONS:
        values = [r[f] for r in rows if r[f] is not None]
        medians[f] = statistics.median(values) if values else None
    return _text(medians)


def from_journal(stem: str, set_aside: bool = False, by_workers: bool = True) -> None:
    """Each converged fixed run the journal ``<stem>-runs.jsonl`` keeps (start, random and best settings), in the
    order kept, rated from its traces (``<stem>-traces.jsonl``), where a run kept the hogwild estimator's
    predicted time left at the end of each segment of 60 iterations and its relative error at 25 / 50 / 75%:

    - the curve's iterations left at each segment's end are that time over the run's mean time per iteration
      (a fixed run's pace hardly moves), and they stand for the answers the run would have recorded;
    - at 25 / 50 / 75% the answer is read back from the relative error (which has lost the sign; the
      segment's answer, at most 59 iterations before, chooses it);
    - the prior is that of the workload's converged fixed runs kept before it, as the product takes it.

    A run's iterations stand for its recorded iterations (the same in an asynchronous job), and its most used
    setting's workers for its layout; ``by_workers``: the prior is that of the runs on the same worker count
    where there are enough, as the product takes it (else ``--pooled``: of them all, the rule before). The runs a
    ``--redo`` set aside are left out (``set_aside``: rated too, each redo's runs with a prior of their own, as in
    a repository of their own)."""
    runs: list[tuple[str, int, dict]] = []  # (key, the workload's redo epoch, row), in the order kept
    epochs: dict[str, int] = {}
    with open(stem + "-runs.jsonl") as f:
        for line in map(json.loads, f):
            if "redo" in line:
                workload = line["redo"].split("/")[0]
                epochs[workload] = epochs.get(workload, 0) + 1
                if not set_aside:
                    runs = [r for r in runs if r[0].split("/")[0] != workload]
            elif "run" in line:
                runs.append((line["run"], epochs.get(line["run"].split("/")[0], 0), line["row"]))
    traces: dict[str, dict] = {}  # by the job id of the run's loss curve (a redone key has several runs)
    with open(stem + "-traces.jsonl") as f:
        for line in map(json.loads, f):
            job_id = (line["traces"].get("curve") or {}).get("job_id")
            if job_id:
                traces[job_id] = line["traces"]  # a later line (the ETA's errors added) wins
    fixed_db_keys = ("start", "fixed", "best")  # the runs of the fixed runs' repository
    for workload, epoch in dict.fromkeys((key.split("/")[0], epoch) for key, epoch, _ in runs
                                         if key.split("/")[1] in fixed_db_keys):
        earlier, curve_rows, both_rows, unsure = [], [], [], 0
        print(f"{workload} (epoch {epoch}): curve alone | the ETA with the earlier runs (runs; their iterations' "
              f"spread)")
        for key, run_epoch, row in runs:
            if key.split("/")[0] != workload or run_epoch != epoch or key.split("/")[1] not in fixed_db_keys:
                continue
            if row["status"] != "converged":
                continue
            total = row["iterations"]
            rating = (traces.get(row.get("job_id"), {}).get("ratings") or {}).get("hogwild")
            workers = _workers(row.get("most_used_setting"))
            layout = () if workers is None else ((0, workers),)
            priors = Priors.of(earlier)
            prior = None if priors is None else (priors.at(workers) if by_workers else priors.pooled)
            if not rating:
                earlier.append(EarlierRun(total, layout=layout))
                continue
            pace, segment = rating["training_time_s"] / total, rating["segment"]
            answers = [(segment * (m + 1), said / pace) for m, said in enumerate(rating["predicted_s"])
                       if said is not None]
            earlier.append(EarlierRun(total, *np.array(answers, dtype=float).reshape(-1, 2).T, layout=layout))
            curve, both = {}, {}
            for f in FRACTIONS:
                error = rating["relative_error"].get(str(f))
                cut = int(total * f)
                actual = total - cut
                m = cut // segment - 1
                said = rating["predicted_s"][m] if 0 <= m < len(rating["predicted_s"]) else None
                curve[f] = error
                if error is None:
                    both[f] = None
                    continue
                if said is None:
                    unsure += 1
                guess = actual * (1 + error) if said is None else said / pace
                predicted = min((actual * (1 + error), actual * (1 - error)), key=lambda p: abs(p - guess))
                if prior is not None:
                    both[f] = abs(prior.combine(cut, max(predicted, 0.0)) - actual) / actual
            about = f"{prior.label()}, sd {prior.sd_log:.2f}" if prior else "no prior"
            print(f"  {key:<16} {total:>7} it  {_text(curve)}  |  {_text(both) if prior else '-'}  ({about})")
            if prior is not None:
                curve_rows.append(curve)
                both_rows.append(both)
        if both_rows:
            print(f"  median over the {len(both_rows)} runs with a prior: curve {_medians(curve_rows)}; the ETA "
                  f"{_medians(both_rows)}" + (f" ({unsure} signs guessed)" if unsure else ""))


def from_estimates(path: str, names: list[str]) -> None:
    """Each converged job of a repository, oldest first, by what its ETA recorded as it ran (the ``estimates``
    table; :func:`tfonline.estimator._quality.eta_errors`): at 25 / 50 / 75% of its iterations the last answer at
    or before, alone and taken with the prior of the converged jobs of its name that started before it (each with
    the answers it recorded), as the ETA now takes it. Table VI's ETA column is this, over the fixed runs."""
    repo = Repository(path, create=False)
    try:
        for name in names or sorted({j["name"] for j in repo.jobs()}):
            curve_rows, both_rows = [], []
            print(f"{name}: the recorded answers alone | the ETA with the earlier runs (runs)")
            for run in sorted(load_runs(repo, name), key=lambda r: r.started_at or 0.0):
                r = eta_errors(repo, run, "hogwild")
                print(f"  {run.job_id} {run.steps.size:>7} it  {_text(r['recorded_error'])}  |  "
                      f"{_text(r['relative_error']) if r['earlier_runs'] else '-'}  ({r['earlier_runs']} runs)")
                if r["earlier_runs"] and None not in r["relative_error"].values():
                    curve_rows.append(r["recorded_error"])
                    both_rows.append(r["relative_error"])
            if both_rows:
                print(f"  median over the {len(both_rows)} runs with a prior: recorded {_medians(curve_rows)}; the "
                      f"ETA {_medians(both_rows)}")
    finally:
        repo.close()


def _workers(setting: str | None) -> int | None:
    """The worker count of a setting's short form ("ps1 w2 t1/2 ..."); None: not one."""
    found = re.search(r"\bw(\d+)\b", setting or "")
    return int(found.group(1)) if found else None


def main(argv: list[str]) -> int:
    flags = argv[2:]
    if argv[:1] == ["--journal"] and len(argv) >= 2 and not argv[1].startswith("--") and \
            set(flags) <= {"--set-aside", "--pooled"} and len(set(flags)) == len(flags):
        from_journal(argv[1], set_aside="--set-aside" in flags, by_workers="--pooled" not in flags)
        return 0
    if not argv or argv[0].startswith("--"):
        print(f"eta_prior.py: expected a repository, or --journal STEM [--set-aside] [--pooled], got "
              f"{' '.join(argv) or 'no arguments'}", file=sys.stderr)
        return 2
    from_estimates(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
