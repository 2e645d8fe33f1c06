"""Benchmark: how long the CLI takes as a whole process, from exec to exit (interpreter start-up included).

Times, over `--runs` rounds after one warm-up round (median, min and max of wall time; median CPU time):
- `python -c pass`, the floor every Python command pays, and `python -c "import typer.rich_utils"`, the
  modules typer needs to draw any help page;
- `specfleet --help` and `kubectl-specfleet status --help`;
- with `--kubeconfig` and `--name`: `kubectl-specfleet status NAME` against that cluster (TLS, one GET,
  the tables drawn), and with `--kubectl` the same through `kubectl specfleet status NAME` (kubectl finds the
  plugin on PATH and execs it);
- with `--zipapp FILE` (the single-file `kubectl-specfleet` that `specfleet dev release` builds with shiv,
  docs/release.md): `status --help`, and `status NAME` with `--kubeconfig`, from that file (its first run, which
  unpacks it into ~/.shiv, is the uncounted warm-up round);
- with `--baseline-src DIR` (an `operator/` directory of another version, e.g. from
  `git archive <rev> operator | tar -x -C DIR`), each specfleet command again with that version's code.

Every round runs each command once, in turn, so all of them see the same load on a shared machine. The
load average is printed before and after: compare figures taken at similar load, and ratios within a run.

    python benchmarks/cli_startup.py
    python benchmarks/cli_startup.py --zipapp dist/kubectl-specfleet
    python benchmarks/cli_startup.py --kubeconfig /tmp/c/kubeconfig --name llama -n demo --kubectl "$(which kubectl)"
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def one_run(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, exit code) of one run, its output read and dropped."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def measure(commands: dict[str, tuple[list[str], dict[str, str]]], runs: int) -> dict[str, dict[str, float | int]]:
    """Round after round, each command once; the first round warms the page cache and .pyc files, uncounted."""
    results: dict[str, list[tuple[float, float, int]]] = {label: [] for label in commands}
    for round_number in range(runs + 1):
        for label, (command, env) in commands.items():
            result = one_run(command, env)
            if result[2] != 0:
                raise SystemExit(f"{' '.join(command)} exited with {result[2]}")
            if round_number:
                results[label].append(result)
    return {label: summary(rows) for label, rows in results.items()}


def summary(results: list[tuple[float, float, int]]) -> dict[str, float | int]:
    walls = [wall for wall, _, _ in results]
    runs = len(results)
    return {
        "runs": runs,
        "wall_median_s": round(statistics.median(walls), 3),
        "wall_min_s": round(min(walls), 3),
        "wall_max_s": round(max(walls), 3),
        "cpu_median_s": round(statistics.median(cpu for _, cpu, _ in results), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="counted runs per command (at least 5)")
    parser.add_argument("--kubeconfig", type=Path, help="a cluster holding the SpeculativeDeployment --name")
    parser.add_argument("--name", help="SpeculativeDeployment for `status`")
    parser.add_argument("--namespace", "-n", default="default")
    parser.add_argument("--kubectl", type=Path, help="kubectl, to time `kubectl specfleet status` too")
    parser.add_argument("--zipapp", type=Path, help="a kubectl-specfleet zipapp (specfleet dev release), timed too")
    parser.add_argument("--baseline-src", type=Path, help="another version's operator/ directory, timed alongside")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be at least 5")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if args.kubeconfig:
        env["KUBECONFIG"] = str(args.kubeconfig)
    mine = {
        "specfleet --help": [str(BIN / "specfleet"), "--help"],
        "kubectl-specfleet status --help": [str(BIN / "kubectl-specfleet"), "status", "--help"],
    }
    zipapp = [str(args.zipapp.absolute())] if args.zipapp else None
    if zipapp:
        mine["kubectl-specfleet status --help (zipapp)"] = [*zipapp, "status", "--help"]
    if args.kubeconfig and args.name:
        status = ["status", args.name, "-n", args.namespace]
        mine["kubectl-specfleet status NAME"] = [str(BIN / "kubectl-specfleet"), *status]
        if zipapp:
            mine["kubectl-specfleet status NAME (zipapp)"] = [*zipapp, *status]
        if args.kubectl:
            mine["kubectl specfleet status NAME"] = [str(args.kubectl), "specfleet", *status]
    commands = {
        "python -c pass": ([sys.executable, "-c", "pass"], env),
        'python -c "import typer.rich_utils"': ([sys.executable, "-c", "import typer.rich_utils"], env),
        **{label: (command, env) for label, command in mine.items()},
    }
    if args.baseline_src:
        baseline_env = {**env, "PYTHONPATH": str(args.baseline_src.absolute())}  # before the installed package
        commands.update(
            {f"{label} (baseline)": (command, baseline_env) for label, command in mine.items() if "zipapp" not in label}
        )
    load_before = os.getloadavg()
    figures = measure(commands, args.runs)
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}; {os.cpu_count()} CPUs")
    print("| command | wall median | wall min - max | CPU median |")
    print("| --- | --- | --- | --- |")
    for label, row in figures.items():
        print(
            f"| `{label}` | {row['wall_median_s']:.3f} s | {row['wall_min_s']:.3f} - {row['wall_max_s']:.3f} s "
            f"| {row['cpu_median_s']:.3f} s |"
        )
    print(json.dumps({"load_before": load_before, "load_after": load_after, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
