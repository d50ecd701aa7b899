"""The ``tfonline`` command.

    tfonline report DB [--job NAME] [--format text|json] [--html OUT.html] [--plots DIR] [--tensorboard DIR]
                       [--compare JOB ...]
    tfonline upgrade DB
    tfonline sweep CLASS --grid NAME=V1,V2 [--grid ...] [--db DB] [--no-tune] [--setting JSON] [--nodes N] ...
    tfonline estimate-quality DB --job NAME [--segment N] [--estimator NAME ...]
    tfonline simulate [--model MODEL.json] [--db DB] [--random-settings R] [--seeds N] [--mode async|sync]
    tfonline calibrate DB [--job NAME] [--holdout F] [--hosts N] [--cores N] [--out MODEL.json]
    tfonline node --cluster HOST:PORT,HOST:PORT,... --index I [--cores N] [--intra N] [--inter N]
                  [--fixed-threads] [--bind ADDRESS] [--drain-s S]
    tfonline node --tf-config [--cores N] [--intra N] [--inter N] [--fixed-threads] [--bind ADDRESS] [--drain-s S]

Failures print one line and exit 1; ``--debug`` shows the traceback.
TensorFlow is imported only by ``node``, ``sweep`` and ``report --tensorboard``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from tfonline.exceptions import ConfigurationError, TfOnlineError


def _report(args) -> int:
    from tfonline.report import collect, compare, compare_text, no_jobs_message, report_json, report_text
    from tfonline.repository import Repository

    if args.tensorboard:
        from tfonline._tensorflow import require

        require()  # the event writer is TensorFlow's: say so before any report is printed
    repo = Repository(args.db, create=False)
    try:
        reports = [collect(repo, job) for job in repo.jobs(args.job)]
        comparison = compare(repo, args.compare) if args.compare else None
        if args.format == "json":
            report = report_json(repo, reports)
            if comparison is not None:
                report["comparison"] = comparison
            print(json.dumps(report, indent=2))
        elif comparison is not None:
            print(compare_text(comparison))
        else:
            print(report_text(repo, reports, args.job))
        drawn = {}
        if args.plots:
            from tfonline.report.plots import draw

            drawn = {r["id"]: draw(repo, r, args.plots) for r in reports}
            print(f"plots: {sum(len(paths) for paths in drawn.values())} PNG files in {args.plots}" if reports
                  else f"plots: none, {no_jobs_message(repo, args.job)}", file=sys.stderr)
        if args.tensorboard:
            from tfonline.tensorboard import check_logdir, write

            check_logdir(args.tensorboard)
            for r in reports:
                write(repo, r["id"], args.tensorboard)
            print(f"tensorboard: {len(reports)} run{'s' if len(reports) != 1 else ''} in {args.tensorboard} "
                  f"(tensorboard --logdir {args.tensorboard})", file=sys.stderr)
        if args.html:
            from tfonline.report.html import page

            with open(args.html, "w", encoding="utf-8") as f:
                f.write(page(repo, reports, comparison, drawn))
            print(f"html: {args.html}", file=sys.stderr)
    finally:
        repo.close()
    return 0


def _simulate(args) -> int:
    from tfonline.simulator.calibrate import load_workload
    from tfonline.simulator.evaluate import evaluate, evaluation_text
    from tfonline.simulator.run import paper_scale

    for name in ("random_settings", "seeds"):
        if getattr(args, name) < 1:
            raise ConfigurationError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.min_segment_s < 0:
        raise ConfigurationError(f"--min-segment-s must be >= 0, got {args.min_segment_s}")
    workload = load_workload(args.model) if args.model else paper_scale(args.mode)
    if workload.curve.progress_to(workload.target_loss) == float("inf"):
        raise ConfigurationError(f"--model's loss curve must reach its target_loss {workload.target_loss:g}, got a "
                                 f"floor of {workload.curve.b2:.4g}: calibrate on runs that reached the target")
    result = evaluate(workload, args.db, random_settings=args.random_settings, seeds=range(args.seeds),
                      min_segment_s=args.min_segment_s)
    print(json.dumps(result, indent=2) if args.json else evaluation_text(result))
    return 0


def _calibrate(args) -> int:
    from tfonline.repository import Repository
    from tfonline.simulator.calibrate import calibrate

    for name in ("hosts", "cores"):
        if getattr(args, name) < 1:
            raise ConfigurationError(f"--{name} must be >= 1, got {getattr(args, name)}")
    repo = Repository(args.db, create=False)
    try:
        result = calibrate(repo, args.job, hosts=args.hosts, cores=args.cores, holdout=args.holdout, seed=args.seed)
    finally:
        repo.close()
    print(result.text())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result.to_dict(), f, indent=2)
        print(f"model: {args.out} (tfonline simulate --model {args.out})", file=sys.stderr)
    return 0


def _upgrade(args) -> int:
    from tfonline.repository import Repository

    if not os.path.exists(args.db):
        raise ConfigurationError(f"db must be an existing tfonline repository, got {args.db!r}: no such file")
    Repository(args.db, create=True).close()
    print(f"{args.db}: upgraded in place to this tfonline's schema")
    return 0


def _estimate_quality(args) -> int:
    from tfonline.estimator import available_estimators
    from tfonline.estimator._quality import estimate_quality, eta_quality, load_runs, quality_text
    from tfonline.repository import Repository

    repo = Repository(args.db, create=False)
    try:
        runs = load_runs(repo, args.job)
        names = args.estimator or available_estimators()
        qualities = [estimate_quality(runs, name, args.segment) for name in names]
        etas = [eta_quality(repo, runs, name, args.segment) for name in names]  # from the estimates they recorded
    finally:
        repo.close()
    print(quality_text(qualities, args.job, args.segment, etas))
    return 0


def _node(args) -> int:
    from tfonline._confine import BIND_VARIABLE, bound_to, check_bind_address, check_listening, is_wildcard
    from tfonline._tensorflow import check_installed, require

    check_installed()
    addresses = _node_addresses(args)
    bind = check_bind_address(args.bind, "--bind")
    if is_wildcard(bind):
        print("tfonline: warning: this node listens on every interface, without authentication: anyone who "
              "reaches it can run any TensorFlow op as this user", file=sys.stderr)
    elif os.environ.get(BIND_VARIABLE) != bind:
        # The bind library acts only when preloaded at the process's start: start again with it.
        sys.stdout.flush()
        os.execve(sys.executable, _node_argv(args, bind), bound_to(dict(os.environ), bind))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    require()  # the version too, now that the process imports TensorFlow anyway
    pools = (args.intra, args.inter)
    if sys.platform.startswith("linux"):  # forks a child per set of pools (safe on Linux: tfonline._node)
        from tfonline._given_node import supervise

        return supervise(addresses, args.index, pools, bind, restartable=not args.fixed_threads,
                         drain_s=args.drain_s, cores=args.cores)
    from tfonline._node import _server_description, start_server

    server = start_server(addresses, args.index, *pools)  # elsewhere, in this process, at these pools for good
    check_listening(os.getpid(), int(addresses[args.index].rsplit(":", 1)[1]), bind, f"node {args.index}")
    print(json.dumps(_server_description(server)), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        while True:
            time.sleep(3600)  # in Python, not in server.join(): signal handlers run between sleeps
    except KeyboardInterrupt:
        os._exit(0)


def _node_addresses(args) -> list[str]:
    """The cluster's addresses, with ``args.cluster`` and ``args.index`` filled in from TF_CONFIG where asked."""
    if args.tf_config:
        from tfonline import tf_config

        if args.cluster is not None or args.index is not None:
            raise ConfigurationError("--tf-config replaces --cluster and --index, got both")
        args.cluster, args.index = ",".join(tf_config.addresses()), tf_config.node_index()
    elif args.cluster is None or args.index is None:
        raise ConfigurationError("node needs --cluster and --index, or --tf-config, got "
                                 f"{'neither' if args.cluster is None and args.index is None else 'one of them'}")
    addresses = [a.strip() for a in args.cluster.split(",") if a.strip()]
    if not 0 <= args.index < len(addresses):
        raise ConfigurationError(f"--index must be in [0, {len(addresses) - 1}] for {len(addresses)} addresses, "
                                 f"got {args.index}")
    if args.cores < 1:
        raise ConfigurationError(f"--cores must be >= 1, got {args.cores}")
    args.intra = args.cores if args.intra is None else args.intra
    args.inter = args.cores if args.inter is None else args.inter
    for name in ("intra", "inter"):
        if getattr(args, name) < 1:
            raise ConfigurationError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.drain_s < 0:
        raise ConfigurationError(f"--drain-s must be >= 0, got {args.drain_s}")
    return addresses


def _node_argv(args, bind: str) -> list[str]:
    return [sys.executable, "-m", "tfonline.cli", "node", "--cluster", args.cluster, "--index", str(args.index),
            "--cores", str(args.cores), "--intra", str(args.intra), "--inter", str(args.inter), "--bind", bind,
            "--drain-s", str(args.drain_s)] + (["--fixed-threads"] if args.fixed_threads else [])


NODE_HELP = """\
Serve one node of a cluster for run(cluster=[...]).

A TensorFlow server has no authentication: anyone who can connect to its port
can run any TensorFlow operation as the user who started it (read and write
files, read the model, end the job). This node therefore listens on --bind
only, 127.0.0.1 by default, where only this host reaches it. Give --bind an
address of another interface only on a trusted, isolated network (multi-host
clusters belong on one); --bind 0.0.0.0 listens on every interface.

The job's driver may ask this node to serve with other thread pools (the
intra_op and inter_op knobs): the node then serves them from a new child
process, on the same port (Linux; elsewhere the pools stay as started). The
request is a TensorFlow op on this node's own server, so only a client that
can already run any op here can make it. --fixed-threads keeps --intra and
--inter for the node's life.

SIGUSR1 asks the node to leave without loss (a planned drain, before a host
goes down): the job's driver moves its variables and its worker to the other
nodes, then releases it, and the node stops (exit code 0). A node that its
job does not release stops --drain-s seconds after the signal; one that no
job holds, or a --fixed-threads node, stops at once. SIGTERM and Ctrl-C stop
the node at once: its job then goes on without it as it would after a crash,
back to its latest checkpoint if the node held variables.
"""


def _simulator_commands(sub) -> None:
    """``simulate`` and ``calibrate``."""
    cores = os.cpu_count() or 1
    simulate = sub.add_parser("simulate", help="random fixed settings and a tuned job on a modelled cluster "
                                               "(default: the paper's, 36 nodes)")
    simulate.add_argument("--model", help="a model written by tfonline calibrate --out (default: the paper's scale)")
    simulate.add_argument("--db", default="simulated.db", help="the repository the tuned jobs are written to "
                                                                "(default simulated.db)")
    simulate.add_argument("--random-settings", type=int, default=100, help="fixed settings to compare (default 100)")
    simulate.add_argument("--seeds", type=int, default=1, help="tuned jobs, one per seed (default 1)")
    simulate.add_argument("--mode", choices=("async", "sync"), default="async", help="the paper-scale job's mode")
    simulate.add_argument("--min-segment-s", type=float, default=120.0,
                          help="the tuner's least segment, in simulated seconds (default 120)")
    simulate.add_argument("--json", action="store_true", help="print the result as JSON")
    simulate.set_defaults(func=_simulate)
    calibrate = sub.add_parser("calibrate", help="fit the simulator's speed model to a repository's fixed-setting "
                                                 "runs, with its error on runs held out")
    calibrate.add_argument("db", help="a repository with fixed-setting runs of one job")
    calibrate.add_argument("--job", help="the job name (default: the one with most fixed-setting runs)")
    calibrate.add_argument("--holdout", type=float, default=0.25, help="share of runs held out (default 0.25)")
    calibrate.add_argument("--seed", type=int, default=0, help="which runs are held out (default 0)")
    calibrate.add_argument("--hosts", type=int, default=1, help="machines the runs' nodes ran on (default 1)")
    calibrate.add_argument("--cores", type=int, default=cores, help=f"cores per machine (default {cores})")
    calibrate.add_argument("--out", metavar="MODEL.json", help="write the model for tfonline simulate --model")
    calibrate.set_defaults(func=_calibrate)


def version_text() -> str:
    """``tfonline 0.2.0 (TensorFlow 2.21.0 from tensorflow-cpu, Python 3.11.7)``, without importing TensorFlow."""
    import platform

    from tfonline._tensorflow import installed_distribution
    from tfonline._version import __version__

    found = installed_distribution()
    tensorflow = f"TensorFlow {found[1]} from {found[0]}" if found else "no TensorFlow"
    return f"tfonline {__version__} ({tensorflow}, Python {platform.python_version()})"


def _sweep(args) -> int:
    from tfonline._tensorflow import require
    from tfonline.sweep import load_class, parse_grid, sweep

    require()
    job_class = load_class(args.job_class)
    grid = parse_grid(args.grid)
    options = {}
    if args.setting is not None:
        try:
            options["setting"] = json.loads(args.setting)
        except ValueError:
            options["setting"] = None
        if not isinstance(options["setting"], dict):
            raise ConfigurationError(f"--setting must be a JSON object of knobs such as '{{\"ps\": 1}}', "
                                     f"got {args.setting!r}")
    results = sweep(job_class, grid, db=args.db, tune=not args.no_tune, nodes=args.nodes, quiet=args.quiet,
                    max_seconds=args.max_seconds, mode=args.mode, **options)
    for result in results:
        print(f"{result.job_id}: {result.status} in {result.completion_time_s:.1f} s, {result.iterations} iterations")
    print(f"tfonline report {args.db} --compare {' '.join(r.job_id for r in results)}")
    return 0


def _sweep_command(sub) -> None:
    sweep = sub.add_parser("sweep", help="a grid of a job class's attributes, one tuned job after another on one "
                                         "cluster")
    sweep.add_argument("job_class", metavar="CLASS", help="module:Class or path/to/file.py:Class")
    sweep.add_argument("--grid", action="append", required=True, metavar="NAME=V1,V2",
                       help="an attribute and its values (JSON where they parse); repeat for more")
    sweep.add_argument("--db", default="tfonline.db", help="the repository (default tfonline.db)")
    sweep.add_argument("--no-tune", action="store_true", help="run each job at its setting, untuned")
    sweep.add_argument("--setting", help="the setting each job starts from, as JSON (default TensorFlow's)")
    sweep.add_argument("--mode", choices=("async", "sync"), default="async")
    sweep.add_argument("--nodes", type=int, help="nodes of the embedded cluster (default: cores + 2)")
    sweep.add_argument("--max-seconds", type=float, help="each job's limit (default: the class's)")
    sweep.add_argument("--quiet", action="store_true", help="no progress lines")
    sweep.set_defaults(func=_sweep)


def _replay(args) -> int:
    from tfonline.replay import replay

    comparison = replay(args.db, args.job, nodes=args.nodes, quiet=args.quiet)
    print(comparison.text())
    return 0 if comparison.exact or comparison.mode != "sync" else 2


def _replay_command(sub) -> None:
    replay = sub.add_parser("replay", help="run a recorded job again with its recorded settings at their steps")
    replay.add_argument("db", help="the SQLite repository the job wrote (the replay is recorded there too)")
    replay.add_argument("--job", required=True, help="the job's id")
    replay.add_argument("--nodes", type=int, help="nodes of the embedded cluster (default: the job's own count)")
    replay.add_argument("--quiet", action="store_true", help="no progress lines")
    replay.set_defaults(func=_replay)


class _Version(argparse.Action):
    """``--version``: the text is made only when asked for (it reads the installed packages' metadata)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfonline", description="Self-tuning TensorFlow parameter-server training.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="tfonline's version, and the TensorFlow and Python it finds")
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="what happened to the jobs in a repository")
    report.add_argument("db", help="the SQLite repository a job wrote")
    report.add_argument("--job", help="only the jobs with this name (or this job id)")
    report.add_argument("--format", choices=("text", "json"), default="text",
                        help="text (default) or json (schema: tfonline.report.JSON_SCHEMA)")
    report.add_argument("--html", metavar="OUT.html", help="also write one self-contained page with tables and plots")
    report.add_argument("--plots", metavar="DIR", help="also draw each job's plots as PNG files into DIR")
    report.add_argument("--tensorboard", metavar="DIR",
                        help="also write each job's history as TensorBoard event files into DIR (imports TensorFlow)")
    report.add_argument("--compare", nargs="+", metavar="JOB",
                        help="completion times of these jobs (ids or names) side by side, with ratios to the first")
    report.set_defaults(func=_report)
    _sweep_command(sub)
    _replay_command(sub)
    upgrade = sub.add_parser("upgrade", help="upgrade a repository written by an older tfonline in place")
    upgrade.add_argument("db", help="the SQLite repository")
    upgrade.set_defaults(func=_upgrade)
    quality = sub.add_parser("estimate-quality", help="rank and error of the progress estimators on fixed-setting runs")
    quality.add_argument("db", help="a repository with several converged runs of one job")
    quality.add_argument("--job", required=True, help="the job name whose runs to compare")
    quality.add_argument("--segment", type=int, default=60, help="iterations per segment (default 60)")
    quality.add_argument("--estimator", action="append", help="an estimator to assess (default: all registered)")
    quality.set_defaults(func=_estimate_quality)
    _simulator_commands(sub)
    cores = os.cpu_count() or 1
    node = sub.add_parser("node", help="serve one node of a cluster (for run(cluster=[...]))", description=NODE_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    node.add_argument("--cluster", help="every node's host:port, comma-separated, in order")
    node.add_argument("--index", type=int, help="this node's position in --cluster")
    node.add_argument("--tf-config", action="store_true",
                      help="take --cluster and --index from the TF_CONFIG environment variable (tfonline.tf_config)")
    node.add_argument("--cores", type=int, default=cores,
                      help=f"the most threads per pool this node offers its jobs (default: this host's cores, {cores})")
    node.add_argument("--intra", type=int, help="intra_op_parallelism_threads to start with (default: --cores)")
    node.add_argument("--inter", type=int, help="inter_op_parallelism_threads to start with (default: --cores)")
    node.add_argument("--fixed-threads", action="store_true",
                      help="keep --intra and --inter: do not restart with the pools the job's driver asks for")
    node.add_argument("--bind", default="127.0.0.1",
                      help="the one address to listen on (default 127.0.0.1: this host only; see above)")
    node.add_argument("--drain-s", type=int, default=30,
                      help="after SIGUSR1, how long to wait for the job to move off this node (default 30)")
    node.set_defaults(func=_node)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TfOnlineError as e:
        if args.debug:
            raise
        print(f"tfonline: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
