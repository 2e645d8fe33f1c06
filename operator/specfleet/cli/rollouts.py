"""`kubectl specfleet` / `specfleet`: look at and steer rollouts (list, status, promote, abort, retry, undo, history).

Commands act through the same annotations the operator reads (`specfleet.io/promote` ...), so they need
only patch rights on SpeculativeDeployments and work whether or not the operator is running right now.

These are the typer commands; what they show and how they reach the cluster is in `specfleet.cli.view`
(no typer, no API models), which a plain `kubectl specfleet status` runs directly.
"""

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from specfleet.api.durations import parse_duration
from specfleet.api.vocabulary import GROUP, PLURAL, PROMOTE_FULL, SERVING_FIELDS, VERSION, Command, command_target
from specfleet.cli.view import (
    Cluster,
    Output,
    _age,
    _fraction,
    _ms,
    _phase,
    _step,
    api_errors,
    connect,
    console,
    emit,
    errors,
    fail,
    follow_rollout,
    get,
    history_table,
    patch,
    render_status,
    show_status,
)

__all__ = ["Cluster", "Output", "connect", "get", "register", "render_status"]
"""What other modules and tests take from here (the commands' helpers live in `specfleet.cli.view`)."""


NamespaceOption = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace; default: the kubeconfig context's.")
]
KubeconfigOption = Annotated[str | None, typer.Option(help="Kubeconfig file; default: KUBECONFIG or ~/.kube/config.")]
ContextOption = Annotated[str | None, typer.Option(help="Kubeconfig context.")]
OutputOption = Annotated[Output, typer.Option("--output", "-o", help="table for people, json or yaml for scripts.")]
NameArgument = Annotated[str, typer.Argument(help="SpeculativeDeployment name.")]


def _duration(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_duration(value)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from error
    return value


WaitOption = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Follow the rollout to its end, for pipelines: one plain line per change of phase, step or verdict; "
        "exit 0 when it succeeds (or there is nothing to do), 1 when it is rolled back or aborted (the reason on "
        "stderr), 2 at --timeout. See docs/ci.md.",
    ),
]
TimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        callback=_duration,
        help="With --wait: give up after this long (90s, 30m, 1h30m); exit 2.",
        show_default="no limit",
    ),
]


def _check_wait(wait: bool, timeout: str | None) -> None:
    if timeout is not None and not wait:
        raise typer.BadParameter("--timeout needs --wait", param_hint="--timeout")


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


def status_command(
    name: NameArgument,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw as the rollout moves (Ctrl-C to stop).")] = False,
    namespace: NamespaceOption = None,
    output: OutputOption = Output.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
) -> None:
    """Phase, step and weight, ready replicas per track, the last analysis and the verdict history.

    In a pipeline, after `kubectl apply`: `status NAME --wait --timeout 45m` exits as the rollout ends (docs/ci.md)."""
    _check_wait(wait, timeout)
    if wait and (watch or output is not Output.TABLE):
        raise typer.BadParameter("--wait prints plain lines: not with --watch or --output", param_hint="--wait")
    show_status(name, watch, namespace, output, kubeconfig, context, wait, timeout)


def _target(command: Command, status: dict[str, Any]) -> str | None:
    """What a command would act on now: the live canary (promote, abort) or the rejected revision (retry)."""
    if command is Command.RETRY:
        return status.get("rejectedRevision")
    canary = status.get("canaryRevision")
    return canary if canary and canary != status.get("stableRevision") else None


def command_annotation(command: Command, value: str, status: dict[str, Any], now: datetime) -> tuple[str, str] | None:
    """The annotation a command writes (`specfleet.io/<command>`) and its value bound to what it acts on now
    (`<value> revision=<rev> <time>`); None when there is nothing to act on. The Argo CD actions write the same."""
    target = _target(command, status)
    if target is None:
        return None
    return command.annotation, f"{value} revision={target} {now.isoformat(timespec='seconds')}"


def paused_patch(paused: bool) -> dict[str, Any]:
    """The merge patch `pause` (True) and `resume` (False) send."""
    return {"spec": {"paused": paused}}


COMMAND_ATTEMPTS = 5


def _command(
    name: str, command: "Command", value: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> tuple[Cluster, tuple[str, str]]:
    """Write the command annotation bound to what it is for (`revision=<rev>`), or refuse and write nothing;
    the cluster and what was written (annotation, value), for `--wait`.

    The write carries the resourceVersion that was read, so the check and the write see the same object
    (a 409 means it changed: read and check again).
    """
    from specfleet.cli import kubeapi

    cluster = connect(kubeconfig, context, namespace)
    for _ in range(COMMAND_ATTEMPTS):
        obj = get(cluster, name)
        status = obj.get("status") or {}
        written = command_annotation(command, value, status, datetime.now(UTC))
        if written is None:
            what = (
                "nothing to retry (no aborted or rolled-back revision)"
                if command is Command.RETRY
                else (f"no canary to {command.value} (phase {status.get('phase', 'Pending')})")
            )
            fail(f"{cluster.namespace}/{name}: {what}; nothing written")
        annotation, stamped = written
        target = command_target(stamped)
        body = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"], "annotations": {annotation: stamped}}
        }
        try:
            cluster.api.patch_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name, body)
        except Exception as error:
            if kubeapi.error_status(error) == 409:
                continue  # changed since it was read: check again
            with api_errors(f"speculativedeployment {cluster.namespace}/{name}"):
                raise
        errors.print(
            f"{command.value} requested for {cluster.namespace}/{name} (revision {target}); "
            f"`specfleet status {name} -w` to follow"
        )
        return cluster, written
    return fail(f"{cluster.namespace}/{name} kept changing; nothing written, try again")


def promote_command(
    name: NameArgument,
    full: Annotated[bool, typer.Option("--full", help="Skip the remaining steps and analyses.")] = False,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
) -> None:
    """Move the canary on: end the current step (a manual gate, or a pause after a failure), or --full."""
    _check_wait(wait, timeout)
    cluster, written = _command(name, Command.PROMOTE, PROMOTE_FULL if full else "step", namespace, kubeconfig, context)
    if wait:
        raise SystemExit(follow_rollout(cluster, name, timeout, written))


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
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
) -> None:
    """Canary again a revision that was aborted or rolled back."""
    _check_wait(wait, timeout)
    cluster, written = _command(name, Command.RETRY, "user", namespace, kubeconfig, context)
    if wait:
        raise SystemExit(follow_rollout(cluster, name, timeout, written))


def pause_command(
    name: NameArgument,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Freeze the rollout (sets spec.paused): no canary starts, no step advances, no analysis counts; traffic
    stays as it is and abort still works."""
    _set_paused(name, True, namespace, kubeconfig, context)


def resume_command(
    name: NameArgument,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Lift a pause (clears spec.paused): the step in progress starts over, its pause and evidence anew."""
    _set_paused(name, False, namespace, kubeconfig, context)


def _set_paused(name: str, paused: bool, namespace: str | None, kubeconfig: str | None, context: str | None) -> None:
    cluster = connect(kubeconfig, context, namespace)
    patch(cluster, name, paused_patch(paused))
    errors.print(f"{cluster.namespace}/{name} {'paused' if paused else 'resumed'}")


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
    served = [h for h in status.get("history", []) if h["outcome"] in SERVED_AS_STABLE and h.get("serving")]
    if to_revision:
        candidates = [h for h in served if h["revision"] == to_revision]
    else:
        candidates = [h for h in served if h["revision"] != status.get("stableRevision")]
    if not candidates:
        known = ", ".join(sorted({h["revision"] for h in served})) or "none"
        fail(f"no revision {to_revision or 'before the current one'} that served as stable in the history ({known})")
    target = candidates[-1]
    patch(cluster, name, {"spec": spec_patch_to(obj.get("spec") or {}, target["serving"])})
    errors.print(f"spec of {cluster.namespace}/{name} set back to revision {target['revision']}: it will be canaried")


SERVED_AS_STABLE = ("Promoted", "Created")
"""History outcomes of revisions that served as stable, which `undo` can return to."""


def spec_patch_to(spec: dict[str, Any], serving: dict[str, Any]) -> dict[str, Any]:
    """A merge patch that makes the serving part of `spec` exactly `serving`: keys it lacks are removed (a
    plain merge of `serving` would keep, say, a drafter `model` the target config does not have)."""

    def removing(current: Any, wanted: Any) -> Any:
        if not isinstance(current, dict) or not isinstance(wanted, dict):
            return wanted
        gone = {key: None for key in current if key not in wanted}
        return {**gone, **{key: removing(current.get(key), value) for key, value in wanted.items()}}

    fields = set(serving) | {key for key in SERVING_FIELDS if key in spec}
    return {key: removing(spec.get(key), serving.get(key)) for key in sorted(fields)}


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
    app.command(name="pause")(pause_command)
    app.command(name="resume")(resume_command)
    app.command(name="undo")(undo_command)
    app.command(name="history")(history_command)
