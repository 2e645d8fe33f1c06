"""`kubectl specfleet` / `specfleet`: look at and steer rollouts (list, status, promote, abort, retry, undo, history).

Commands act through the same annotations the operator reads (`specfleet.io/promote` ...), so they need
only patch rights on SpeculativeDeployments and work whether or not the operator is running right now.
"""

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specfleet.api.resource import GROUP, PLURAL, VERSION
from specfleet.api.vocabulary import PROMOTE_FULL, Command

console = Console(width=None if sys.stdout.isatty() else 160)  # pipes get whole columns, not "NAMESPA…"
errors = Console(stderr=True)


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


NamespaceOption = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace; default: the kubeconfig context's.")
]
KubeconfigOption = Annotated[str | None, typer.Option(help="Kubeconfig file; default: KUBECONFIG or ~/.kube/config.")]
ContextOption = Annotated[str | None, typer.Option(help="Kubeconfig context.")]
OutputOption = Annotated[Output, typer.Option("--output", "-o", help="table for people, json or yaml for scripts.")]
NameArgument = Annotated[str, typer.Argument(help="SpeculativeDeployment name.")]


@dataclass
class Cluster:
    api: client.CustomObjectsApi
    namespace: str


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Cluster:
    try:
        config.load_kube_config(config_file=kubeconfig, context=context)
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, FileNotFoundError, TypeError) as error:
        fail(f"no usable kubeconfig ({error}); set KUBECONFIG, pass --kubeconfig, or run `specfleet dev up`")
    default_namespace = (active or {}).get("context", {}).get("namespace", "default")
    return Cluster(client.CustomObjectsApi(), namespace or default_namespace)


def fail(message: str, code: int = 1) -> None:
    errors.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Turn API failures into one clear line: not found, forbidden (RBAC), or no cluster."""
    try:
        yield
    except ApiException as error:
        if error.status == 404:
            fail(f"{what}: not found")
        if error.status == 403:
            reason = json.loads(error.body).get("message", "") if error.body else ""
            fail(f"{what}: forbidden by RBAC: {reason}")
        fail(f"{what}: the API server answered {error.status} {error.reason}")
    except (urllib3.exceptions.HTTPError, OSError) as error:
        fail(f"cannot reach the cluster: {error}")


def get(cluster: Cluster, name: str) -> dict[str, Any]:
    with api_errors(f"speculativedeployment {cluster.namespace}/{name}"):
        return cluster.api.get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name)


def patch(cluster: Cluster, name: str, body: dict[str, Any]) -> None:
    with api_errors(f"speculativedeployment {cluster.namespace}/{name}"):
        cluster.api.patch_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name, body)


def emit(data: Any, output: Output) -> None:
    if output is Output.JSON:
        typer.echo(json.dumps(data, indent=2, default=str))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


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


def list_command(
    namespace: NamespaceOption = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="List in every namespace.")] = False,
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """List SpeculativeDeployments with their phase, revisions, step and last measurements."""
    cluster = connect(kubeconfig, context, namespace)
    with api_errors("listing speculativedeployments"):
        if all_namespaces:
            items = cluster.api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        else:
            items = cluster.api.list_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL)["items"]
    if output is not Output.TABLE:
        emit(items, output)
        return
    table = Table(box=None, header_style="bold")
    columns = ["NAMESPACE"] if all_namespaces else []
    columns += ["NAME", "PHASE", "STABLE", "CANARY", "STEP", "WEIGHT", "ALPHA", "P95/TOKEN", "AGE"]
    for column in columns:
        table.add_column(column, no_wrap=True)
    for obj in items:
        status = obj.get("status") or {}
        canary = (status.get("lastAnalysis") or {}).get("canary") or {}
        row: list[str | Text] = [obj["metadata"]["namespace"]] if all_namespaces else []
        row += [
            obj["metadata"]["name"],
            _phase(status),
            status.get("stableRevision", "-"),
            status.get("canaryRevision", "-"),
            _step(obj),
            f"{status.get('canaryWeight', 0)}%",
            _fraction(canary.get("acceptanceAlpha")),
            _ms(canary.get("tokenLatencyP95Seconds")),
            _age(obj["metadata"].get("creationTimestamp")),
        ]
        table.add_row(*row)
    if not items:
        errors.print(f"no SpeculativeDeployments in {'any namespace' if all_namespaces else cluster.namespace}")
        return
    console.print(table)


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
            ("p50 latency per token", _ms, "tokenLatencyP50Seconds"),
            ("p95 latency per token", _ms, "tokenLatencyP95Seconds"),
            ("p95 latency per step", _ms, "stepLatencyP95Seconds"),
            ("p95 TTFT", _ms, "ttftP95Seconds"),
            ("error rate", _pct, "errorRate"),
            ("requests/s per pod", _fraction, "requestsPerPodPerSecond"),
            ("tokens/s", lambda v: "-" if v is None else f"{v:.0f}", "generationTokensPerSecond"),
        ]
        for label, fmt, key in rows:
            measures.add_row(label, fmt(canary.get(key)), fmt(stable.get(key)))
        parts.append(measures)
        if analysis.get("reasons"):
            parts.append(Text("\n".join(f"• {r}" for r in analysis["reasons"]), style="yellow"))
        if canary.get("acceptancePerPosition"):
            parts.append(
                Panel(_bars(canary["acceptancePerPosition"]), title="canary acceptance per position", expand=False)
            )
    if status.get("history"):
        parts.append(history_table(status["history"][-5:]))
    return Group(*parts)


def history_table(history: list[dict[str, Any]]) -> Table:
    table = Table(title="History", header_style="bold", title_justify="left")
    for column in ("revision", "outcome", "time", "config", "alpha", "p95/token", "reason"):
        table.add_column(column, overflow="fold")
    for entry in history:
        style = "green" if entry["outcome"] == "Promoted" else "red" if entry["outcome"] != "Superseded" else ""
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


def status_command(
    name: NameArgument,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw as the rollout moves (Ctrl-C to stop).")] = False,
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Phase, step and weight, ready replicas per track, the last analysis and the verdict history."""
    cluster = connect(kubeconfig, context, namespace)
    obj = get(cluster, name)
    if output is not Output.TABLE:
        emit(obj.get("status") or {}, output)
        return
    if not watch:
        console.print(render_status(obj))
        return
    with Live(render_status(obj), console=console, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(1)
                live.update(render_status(get(cluster, name)))
        except KeyboardInterrupt:
            pass


def _target(command: Command, status: dict[str, Any]) -> str | None:
    """What a command would act on now: the live canary (promote, abort) or the rejected revision (retry)."""
    if command is Command.RETRY:
        return status.get("rejectedRevision")
    canary = status.get("canaryRevision")
    return canary if canary and canary != status.get("stableRevision") else None


COMMAND_ATTEMPTS = 5


def _command(
    name: str, command: Command, value: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> None:
    """Write the command annotation bound to what it is for (`revision=<rev>`), or refuse and write nothing.

    The write carries the resourceVersion that was read, so the check and the write see the same object
    (a 409 means it changed: read and check again).
    """
    cluster = connect(kubeconfig, context, namespace)
    for _ in range(COMMAND_ATTEMPTS):
        obj = get(cluster, name)
        status = obj.get("status") or {}
        target = _target(command, status)
        if target is None:
            what = (
                "nothing to retry (no aborted or rolled-back revision)"
                if command is Command.RETRY
                else (f"no canary to {command.value} (phase {status.get('phase', 'Pending')})")
            )
            fail(f"{cluster.namespace}/{name}: {what}; nothing written")
        stamped = f"{value} revision={target} {datetime.now(UTC).isoformat(timespec='seconds')}"
        body = {
            "metadata": {
                "resourceVersion": obj["metadata"]["resourceVersion"],
                "annotations": {command.annotation: stamped},
            }
        }
        try:
            cluster.api.patch_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name, body)
        except ApiException as error:
            if error.status == 409:
                continue  # changed since it was read: check again
            with api_errors(f"speculativedeployment {cluster.namespace}/{name}"):
                raise
        errors.print(
            f"{command.value} requested for {cluster.namespace}/{name} (revision {target}); "
            f"`specfleet status {name} -w` to follow"
        )
        return
    fail(f"{cluster.namespace}/{name} kept changing; nothing written, try again")


def promote_command(
    name: NameArgument,
    full: Annotated[bool, typer.Option("--full", help="Skip the remaining steps and analyses.")] = False,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Move the canary on: end the current step (a manual gate, or a pause after a failure), or --full."""
    _command(name, Command.PROMOTE, PROMOTE_FULL if full else "step", namespace, kubeconfig, context)


def abort_command(
    name: NameArgument,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Send all traffic back to stable, then remove the canary; the revision is not tried again until retry."""
    _command(name, Command.ABORT, "user", namespace, kubeconfig, context)


def retry_command(
    name: NameArgument,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Canary again a revision that was aborted or rolled back."""
    _command(name, Command.RETRY, "user", namespace, kubeconfig, context)


def undo_command(
    name: NameArgument,
    to_revision: Annotated[str | None, typer.Option(help="Revision to go back to; default: the previous one.")] = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Put a previously promoted config back into the spec; it is canaried like any change."""
    cluster = connect(kubeconfig, context, namespace)
    obj = get(cluster, name)
    status = obj.get("status") or {}
    promoted = [h for h in status.get("history", []) if h["outcome"] == "Promoted" and h.get("serving")]
    if to_revision:
        candidates = [h for h in promoted if h["revision"] == to_revision]
    else:
        candidates = [h for h in promoted if h["revision"] != status.get("stableRevision")]
    if not candidates:
        known = ", ".join(sorted({h["revision"] for h in promoted})) or "none"
        fail(f"no promoted revision {to_revision or 'before the current one'} in the history (promoted: {known})")
    target = candidates[-1]
    patch(cluster, name, {"spec": target["serving"]})
    errors.print(f"spec of {cluster.namespace}/{name} set back to revision {target['revision']}: it will be canaried")


def history_command(
    name: NameArgument,
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Every revision that was canaried, and how it ended."""
    cluster = connect(kubeconfig, context, namespace)
    history = (get(cluster, name).get("status") or {}).get("history", [])
    if output is not Output.TABLE:
        emit(history, output)
        return
    if not history:
        errors.print(f"{cluster.namespace}/{name} has no history yet")
        return
    console.print(history_table(history))


def register(app: typer.Typer) -> None:
    app.command(name="list")(list_command)
    app.command(name="status")(status_command)
    app.command(name="promote")(promote_command)
    app.command(name="abort")(abort_command)
    app.command(name="retry")(retry_command)
    app.command(name="undo")(undo_command)
    app.command(name="history")(history_command)
