"""What `kubectl specfleet` shows and how it reaches the cluster, without typer.

`kubectl specfleet status` is typed many times a day; `specfleet.cli.main` runs a plain `status` from here
without building the typer app (about 0.1 s saved), so this module imports neither typer nor the API
models (pydantic): rich and the standard library at the top, yaml and the HTTP client where they are used.
The typer commands (`specfleet.cli.rollouts`) use the same functions.
"""

import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specfleet.api.vocabulary import GROUP, PLURAL, VERSION
from specfleet.console import make_console

if TYPE_CHECKING:
    from specfleet.cli.kubeapi import CustomObjectsApi

console = make_console()  # a pipe gets whole columns ("NAMESPACE", not "NAMESPA…") and unwrapped lines
errors = make_console(stderr=True)


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


@dataclass
class Cluster:
    api: "CustomObjectsApi"
    namespace: str


def _library_client(kubeconfig: str | None, context: str | None) -> tuple["CustomObjectsApi", str]:
    """The Kubernetes library's client, for kubeconfigs `kubeapi` leaves to it (exec plugins, merged files...)."""
    from kubernetes import client, config

    config.load_kube_config(config_file=kubeconfig, context=context)
    _, active = config.list_kube_config_contexts(config_file=kubeconfig)
    return client.CustomObjectsApi(), (active or {}).get("context", {}).get("namespace", "default")


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Cluster:
    from specfleet.cli import kubeapi

    api: CustomObjectsApi
    try:
        try:
            api, default_namespace = kubeapi.from_kubeconfig(kubeconfig, context)
        except kubeapi.UnsupportedKubeconfigError:
            api, default_namespace = _library_client(kubeconfig, context)
    except Exception as error:  # the library raises its ConfigException, FileNotFoundError or TypeError
        fail(f"no usable kubeconfig ({error}); set KUBECONFIG, pass --kubeconfig, or run `specfleet dev up`")
    return Cluster(api, namespace or default_namespace)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line and exit with `code` (SystemExit: the same exit code with or without click's main)."""
    errors.print(f"[red]error:[/] {message}")
    raise SystemExit(code)


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Turn API failures into one clear line: not found, forbidden (RBAC), or no cluster."""
    from specfleet.cli import kubeapi

    try:
        yield
    except Exception as error:  # from `kubeapi` or the Kubernetes library, whichever `connect` chose
        status = kubeapi.error_status(error)
        if status == 404:
            fail(f"{what}: not found")
        if status == 403:
            body = getattr(error, "body", None)
            reason = json.loads(body).get("message", "") if body else ""
            fail(f"{what}: forbidden by RBAC: {reason}")
        if status is not None:
            fail(f"{what}: the API server answered {status} {getattr(error, 'reason', '')}")
        if kubeapi.is_connection_error(error):
            fail(f"cannot reach the cluster: {error}")
        raise


def get(cluster: Cluster, name: str) -> dict[str, Any]:
    with api_errors(f"speculativedeployment {cluster.namespace}/{name}"):
        obj = cluster.api.get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name)
    if not isinstance(obj, dict):
        raise TypeError(f"speculativedeployment {cluster.namespace}/{name}: the API answered {type(obj).__name__}")
    return obj


def patch(cluster: Cluster, name: str, body: dict[str, Any]) -> None:
    with api_errors(f"speculativedeployment {cluster.namespace}/{name}"):
        cluster.api.patch_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name, body)


YAML_WIDTH = 1 << 20
"""PyYAML folds long strings at 80 columns by default; a reason or a summary should stay one greppable line."""


def emit(data: Any, output: Output) -> None:
    """JSON or YAML exactly as the API server gave it: never through rich, so nothing is wrapped or styled."""
    if output is Output.JSON:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, width=YAML_WIDTH))
    sys.stdout.flush()


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _seconds(seconds: float | None) -> str:
    return _ms(seconds) if seconds is None or seconds < 1 else f"{seconds:.2f} s"


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _change(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.2f} pt"


GUARDRAILS_FILE = Path(__file__).with_name("guardrails.yaml")
GUARDRAILS_HEADER = (
    "# Generated by `specfleet guardrails > operator/specfleet/cli/guardrails.yaml` from the judge's registry\n"
    "# (judge/guardrails/): how `kubectl specfleet status` shows each built-in guardrail. Do not edit.\n"
)
READS: dict[str, Callable[[float | None], str]] = {
    "fraction": _fraction,
    "change": _change,
    "points": _points,
    "share": _pct,
    "milliseconds": _ms,
    "seconds": _seconds,
}
"""How a guardrail's numbers read (`judge.guardrail.Reads`): a change against stable, points, a share, a time."""
GATE_UNITS: dict[str, tuple[str, Callable[[float | None], str]]] = {
    "minRequests": ("canary requests", lambda v: "-" if v is None else f"{v:.0f}"),
}
"""The judge's own gate, judged before the guardrails that need requests."""


@functools.cache
def guardrail_units() -> dict[str, tuple[str, Callable[[float | None], str]]]:
    """How each built-in guardrail's estimate, bounds and limit read, from the registry's generated copy (the
    judge itself imports the API models, which `status` does without)."""
    import yaml

    registry = yaml.safe_load(GUARDRAILS_FILE.read_text())
    return {**GATE_UNITS, **{g["name"]: (g["label"], READS[g["reads"]]) for g in registry}}


def custom_units(custom: list[dict[str, Any]]) -> dict[str, tuple[str, Callable[[float | None], str]]]:
    """How the checks of `rollout.guardrails.custom` read: a rate's change in points, a latency's relative."""
    units: dict[str, tuple[str, Callable[[float | None], str]]] = {}
    for guardrail in custom:
        name, latency = f"custom:{guardrail.get('name', '')}", guardrail.get("latency")
        if isinstance(latency, dict):
            units[name] = (f"{name} (p{float(latency.get('quantile', 0.95)) * 100:g} vs stable)", _change)
        else:
            better = (guardrail.get("rate") or {}).get("higherIsBetter", True)
            units[name] = (f"{name} ({'fall' if better else 'rise'} vs stable)", _points)
    return units


def guardrail_table(checks: list[dict[str, Any]], custom: list[dict[str, Any]] | None = None) -> Table:
    """Per guardrail: its verdict, the estimate, the confidence bounds, the limit, and what it still needs.
    `custom`: the spec's `rollout.guardrails.custom`, to read their checks in their own units."""
    units = {**guardrail_units(), **custom_units(custom or [])}
    table = Table(title="Guardrails", header_style="bold", title_justify="left")
    for column in ("guardrail", "verdict", "estimate", "bounds", "limit", "needs"):
        table.add_column(column, justify="left" if column in ("guardrail", "needs") else "right")
    styles = {"Pass": "green", "Fail": "red"}
    for check in checks:
        label, fmt = units.get(check["guardrail"], (check["guardrail"], _fraction))
        lower, upper = check.get("lower"), check.get("upper")
        bounds = "-" if lower is None or upper is None else f"{fmt(lower)} .. {fmt(upper)}"
        table.add_row(
            label,
            Text(check["verdict"], style=styles.get(check["verdict"], "yellow")),
            fmt(check.get("estimate")),
            bounds,
            fmt(check.get("limit")),
            check.get("needs") or "",
        )
    return table


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


PHASE_STYLE = {
    "Healthy": "green",
    "Progressing": "cyan",
    "Paused": "yellow",
    "Degraded": "red",
    "Aborted": "red",
    "RolledBack": "red",
}


def _phase(status: dict[str, Any]) -> Text:
    phase = status.get("phase", "Pending")
    return Text(phase, style=PHASE_STYLE.get(phase, ""))


def _step(obj: dict[str, Any]) -> str:
    status, steps = obj.get("status") or {}, obj["spec"].get("rollout", {}).get("steps", [])
    index = status.get("currentStep")
    return "-" if index is None else f"{index + 1}/{len(steps)}"


def _bars(per_position: list[float], width: int = 30) -> Table:
    """Per-position acceptance as a small horizontal bar chart: where the drafter's guesses stop landing."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(justify="right")
    table.add_column()
    table.add_column(justify="right")
    for position, rate in enumerate(per_position):
        filled = round(max(0.0, min(rate, 1.0)) * width)
        table.add_row(f"pos {position}", Text("█" * filled + "·" * (width - filled), style="cyan"), f"{rate:.0%}")
    return table


def render_status(obj: dict[str, Any]) -> Group:
    """Everything `status` shows, as rich renderables (also redrawn live by `status -w`)."""
    status, meta = obj.get("status") or {}, obj["metadata"]
    ready = status.get("readyReplicas") or {}
    header = Table.grid(padding=(0, 2))
    header.add_column(style="bold")
    header.add_column()
    header.add_row("Name", f"{meta['namespace']}/{meta['name']}")
    header.add_row("Phase", _phase(status))
    header.add_row("Stable", f"{status.get('stableRevision', '-')}  ({ready.get('stable', 0)} ready)")
    if status.get("canaryRevision"):
        header.add_row("Canary", f"{status['canaryRevision']}  ({ready.get('canary', 0)} ready)")
        header.add_row("Step", f"{_step(obj)}  weight {status.get('canaryWeight', 0)}%")
    holdback = status.get("holdback") or {}
    if holdback.get("revision"):
        header.add_row("Holdback", f"{holdback['revision']}  ({ready.get('holdback', 0)} ready)  {holdback['summary']}")
    if holdback.get("revision") or holdback.get("message"):
        header.add_row("Speed-up", _speedup(holdback))
    for condition in status.get("conditions", []):
        if condition.get("status") != "True" or condition.get("type") == "Progressing":
            header.add_row(
                condition["type"],
                f"{condition['status']} {condition.get('reason', '')}: {condition.get('message', '')}",
            )
    parts: list[Any] = [header]
    analysis = status.get("lastAnalysis")
    if analysis:
        canary, stable = analysis.get("canary") or {}, analysis.get("stable") or {}
        measures = Table(
            title=f"Last analysis: {analysis['verdict']} at {analysis['time']} (step {analysis.get('step', 0) + 1}, "
            f"look {analysis.get('look', 1)}, {analysis.get('evidenceSeconds', '?')} s of evidence)",
            header_style="bold",
            title_justify="left",
        )
        for column in ("", "canary", "stable"):
            measures.add_column(column, justify="right")
        rows = [
            ("acceptance alpha (per token)", _fraction, "acceptanceAlpha"),
            ("accepted/drafted (falls with k)", _pct, "acceptanceRate"),
            ("mean accepted length", _fraction, "meanAcceptedLength"),
            ("mean latency per token", _ms, "tokenLatencyMeanSeconds"),
            ("p50 latency per token", _ms, "tokenLatencyP50Seconds"),
            ("p95 latency per token", _ms, "tokenLatencyP95Seconds"),
            ("p95 latency per step", _ms, "stepLatencyP95Seconds"),
            ("p95 TTFT", _ms, "ttftP95Seconds"),
            ("error rate", _pct, "errorRate"),
            ("requests/s per pod", _fraction, "requestsPerPodPerSecond"),
            ("tokens/s", lambda v: "-" if v is None else f"{v:.0f}", "generationTokensPerSecond"),
            ("output tokens/s per pod", lambda v: "-" if v is None else f"{v:.0f}", "generationTokensPerPodPerSecond"),
            ("completed of offered", _pct, "servedFraction"),
            ("p95 queue time", _seconds, "queueTimeP95Seconds"),
            ("KV cache used (mean)", _pct, "kvCacheUsageMean"),
            ("KV cache used (max)", _pct, "kvCacheUsageMax"),
            ("preemptions/s", _fraction, "preemptionsPerSecond"),
        ]
        for label, fmt, key in rows:
            measures.add_row(label, fmt(canary.get(key)), fmt(stable.get(key)))
        parts.append(measures)
        if analysis.get("checks"):
            custom = ((obj.get("spec") or {}).get("rollout") or {}).get("guardrails", {}).get("custom") or []
            parts.append(guardrail_table(analysis["checks"], custom))
        if analysis.get("reasons"):
            parts.append(Text("\n".join(f"• {r}" for r in analysis["reasons"]), style="yellow"))
        if canary.get("acceptancePerPosition"):
            parts.append(
                Panel(_bars(canary["acceptancePerPosition"]), title="canary acceptance per position", expand=False)
            )
    if status.get("preflight"):
        check = status["preflight"]
        style = {"Passed": "green", "Failed": "red"}.get(check.get("state", ""), "yellow")
        message = f": {check['message']}" if check.get("message") else ""
        parts.append(Text(f"Preflight of {check['revision']}: {check.get('state', '?')}{message}", style=style))
    if (status.get("drift") or {}).get("message"):
        drift = status["drift"]
        load = f" (per-pod load x{drift['loadRatio']:.2f} of promotion's)" if drift.get("loadRatio") else ""
        parts.append(Text(f"Drift: {drift['message']}{load}"))
    if status.get("experiment"):
        parts.append(experiment_table(status["experiment"]))
    if status.get("history"):
        parts.append(history_table(status["history"][-5:]))
    return Group(*parts)


def _speedup(holdback: dict[str, Any]) -> str:
    """Stable's speed-up over the holdback with its bounds, or why there is none yet."""
    measured = holdback.get("speedup") or {}
    if measured.get("estimate") is None:
        return measured.get("message") or holdback.get("message") or "not measured yet"
    text = f"{measured['estimate']:.3f}x ({measured['lower']:.3f}-{measured['upper']:.3f})"
    if measured.get("throughputRatio") is not None:
        text += f", output tokens/s per pod x{measured['throughputRatio']:.2f}"
    return f"{text} at {measured['time']}"


def experiment_table(experiment: dict[str, Any]) -> Table:
    """Every candidate of the last experiment with what it measured next to stable, in its own window."""
    ended = f", ended {experiment['endedAt']}" if experiment.get("endedAt") else ""
    table = Table(
        title=f"Experiment {experiment['revision']} ({experiment.get('mode', '')}{ended})",
        header_style="bold",
        title_justify="left",
    )
    for column in ("#", "config", "state", "mean/token vs stable", "tokens/s/pod vs stable", "alpha", "p95/token"):
        table.add_column(column, overflow="fold")
    styles = {"Chosen": "green", "Failed": "red", "Measuring": "yellow"}
    for candidate in experiment.get("candidates", []):
        canary = candidate.get("canary") or {}
        state = candidate.get("state", "")
        reason = f" ({candidate['reason']})" if candidate.get("reason") else ""
        table.add_row(
            str(candidate["index"]),
            candidate.get("summary", ""),
            Text(state + reason, style=styles.get(state, "")),
            _ratio(candidate.get("tokenLatencyRatio")),
            _ratio(candidate.get("throughputRatio")),
            _fraction(canary.get("acceptanceAlpha")),
            _ms(canary.get("tokenLatencyP95Seconds")),
        )
    return table


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"x{value:.3f}"


def history_table(history: list[dict[str, Any]]) -> Table:
    table = Table(title="History", header_style="bold", title_justify="left")
    for column in ("revision", "outcome", "time", "config", "alpha", "p95/token", "reason"):
        table.add_column(column, overflow="fold")
    for entry in history:
        quiet = ("Superseded", "KeptStable")
        style = "green" if entry["outcome"] == "Promoted" else "red" if entry["outcome"] not in quiet else ""
        table.add_row(
            entry["revision"],
            Text(entry["outcome"], style=style),
            entry["time"],
            entry.get("summary", ""),
            _fraction(entry.get("acceptanceAlpha")),
            _ms(entry.get("tokenLatencyP95Seconds")),
            entry.get("reason", ""),
        )
    return table


def show_status(
    name: str,
    watch: bool = False,
    namespace: str | None = None,
    output: Output = Output.TABLE,
    kubeconfig: str | None = None,
    context: str | None = None,
    wait: bool = False,
    timeout: str | None = None,
) -> None:
    """`status`: the object's status as tables (redrawn with `watch`), or as JSON or YAML; with `wait`, one line
    per change until the rollout ends (`specfleet.cli.wait`), and its exit code."""
    cluster = connect(kubeconfig, context, namespace)
    if wait:
        raise SystemExit(follow_rollout(cluster, name, timeout))
    obj = get(cluster, name)
    if output is not Output.TABLE:
        emit(obj.get("status") or {}, output)
        return
    if not watch:
        console.print(render_status(obj))
        return
    from rich.live import Live

    with Live(render_status(obj), console=console, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(1)
                live.update(render_status(get(cluster, name)))
        except KeyboardInterrupt:
            pass


def follow_rollout(cluster: Cluster, name: str, timeout: str | None, command: tuple[str, str] | None = None) -> int:
    """Follow the rollout of `name` to its end (`specfleet.cli.wait.follow`); the exit code. An API error that
    is not worth trying again ends it as one line (exit 1)."""
    from specfleet.cli.wait import follow

    def read() -> dict[str, Any]:  # errors as raised: `follow` tries a connection error again, `get` would exit
        obj = cluster.api.get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name)
        if not isinstance(obj, dict):
            raise TypeError(f"speculativedeployment {what}: the API answered {type(obj).__name__}")
        return obj

    what = f"{cluster.namespace}/{name}"
    with api_errors(f"speculativedeployment {what}"):
        return follow(read, what, timeout, command)
