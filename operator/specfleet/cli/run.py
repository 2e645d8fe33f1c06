"""`specfleet run`: the operator process.

kopf and the controller are imported when the command runs, not when the CLI starts (see `cli.main`).
"""

import logging
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from specfleet.render.policy import DEFAULT_POLICY, TemplatePolicy


class LogFormat(StrEnum):
    HUMAN = "human"
    JSON = "json"


def run(
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Watch only this namespace (repeatable); default: all namespaces."),
    ] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig to use; default: in-cluster, then KUBECONFIG / ~/.kube/config.")
    ] = None,
    liveness: Annotated[
        str, typer.Option(help="Liveness endpoint URL served by the operator ('' to disable).")
    ] = "http://0.0.0.0:8080/healthz",
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve the operator's Prometheus metrics on this port.")
    ] = None,
    log_format: Annotated[LogFormat, typer.Option(help="Log lines for people or for log pipelines.")] = LogFormat.HUMAN,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every reconcile.")] = False,
    leader_election: Annotated[
        str | None,
        typer.Option(
            metavar="NAMESPACE/NAME",
            help="Only the holder of this coordination.k8s.io Lease reconciles; the others stand by and take over "
            "when it stops. Default: the Lease 'specfleet' in the watched namespace (the first, sorted), else in "
            "the pod's own, else in 'default', so a second run on the same fleets stands by. A fleet stamped by "
            "another live operator (another Lease) is left to it. 'off': no election, for when nothing else can "
            "run against these fleets.",
        ),
    ] = None,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            help="Prometheus that scrapes the vLLM pods, for objects whose spec names none. Without either, a "
            "canary waits (Error analyses, onProviderError) unless its spec says rollout.unguarded: true."
        ),
    ] = None,
    allow_prometheus_url: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL",
            help="A prefix (scheme://host:port/path) that a spec's prometheus.url may be under (repeatable). "
            "By default only --prometheus-url is: a spec naming another URL gets an Error verdict, no request "
            "and no token. See docs/install.md.",
        ),
    ] = None,
    pod_url_template: Annotated[
        str,
        typer.Option(
            envvar="SPECFLEET_POD_URL_TEMPLATE",
            help="How the operator reaches a vLLM pod for output equivalence's requests ({ip}, {port}, {namespace}, "
            "{name} filled in); the dev cluster maps pods to the simulator with it.",
        ),
    ] = "http://{ip}:{port}",
    shards: Annotated[
        int,
        typer.Option(
            min=1,
            help="Split the fleets between this many operator processes (needs leader election, with "
            "--leader-election NAMESPACE/BASE or its default; shard I elects its replica with the Lease "
            "BASE-shard-I-of-N). A fleet belongs to the shard its "
            "namespace/name hashes to, or to the one its label specfleet.io/shard names. See docs/sharding.md.",
        ),
    ] = 1,
    shard: Annotated[int, typer.Option(min=0, help="Which of the --shards this process is (0 .. N-1).")] = 0,
    workers: Annotated[
        int, typer.Option(min=1, max=64, help="Objects reconciled at once (docs/benchmarks.md: more than 4 no faster).")
    ] = 4,
    resync: Annotated[
        float, typer.Option(min=5, help="Seconds between two looks at an object when nothing happens.")
    ] = 300.0,
    notifications_config: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The operator's notification targets (targets.yaml: webhook, slack, teams), sent every step, "
            "gate, promotion, rollback, abort and drift. See docs/notifications.md.",
        ),
    ] = None,
    namespace_notifications: Annotated[
        bool,
        typer.Option(
            help="Also send to the targets each namespace lists in its Secret specfleet-notifications (the "
            "operator reads that Secret only), when their URLs are under an --allow-notification-url prefix.",
        ),
    ] = False,
    allow_notification_url: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL",
            help="A prefix (scheme://host:port/path) that a namespace's notification target URLs may be under "
            "(repeatable). None: no namespace's target is sent to.",
        ),
    ] = None,
    notification_attempts: Annotated[
        int, typer.Option(min=1, max=20, help="Tries per notification and target before giving up.")
    ] = 5,
    notification_timeout: Annotated[
        float, typer.Option(min=0.1, max=60, help="Seconds one notification attempt may take to connect and to read.")
    ] = 5.0,
    template_policy: Annotated[
        TemplatePolicy,
        typer.Option(
            help="The Pod Security Standard level a fleet's spec.template must meet: a template adding more "
            "(a privileged sidecar, a hostPath volume, seccomp Unconfined...) makes the spec invalid, naming the "
            "field, and no pod is rendered from it. privileged: no check.",
        ),
    ] = DEFAULT_POLICY,
    inference_pools: Annotated[
        bool,
        typer.Option(
            help="Own the InferencePools of fleets with spec.rollout.trafficRouting.inferencePool (watch, create, "
            "patch, delete inferencepools; the chart's inferencePools.enabled). Off: none is watched or written, "
            "and such a fleet is held (SpecValid False, a Warning event naming this flag).",
        ),
    ] = False,
) -> None:
    """Run the operator: reconcile SpeculativeDeployments into vLLM fleets and canary every change."""
    import kopf

    from specfleet.controller.handlers import Controller, OperatorOptions, api_connections, choose_election
    from specfleet.controller.kube import Kube, load_config
    from specfleet.sharding import Shard

    kopf.configure(
        verbose=verbose, log_format=kopf.LogFormat.JSON if log_format is LogFormat.JSON else kopf.LogFormat.FULL
    )
    if not verbose:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled watch event
    try:
        election = choose_election(leader_election, namespace or [], _pod_namespace())
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--leader-election") from error
    from specfleet.controller.notifier import DeliveryPolicy
    from specfleet.reach import UrlRefusedError, parse_prefix, prometheus_allow_list

    try:
        prometheus_allow_list(prometheus_url, allow_prometheus_url or ())
    except UrlRefusedError as error:
        raise typer.BadParameter(str(error), param_hint="--allow-prometheus-url") from error
    for url in allow_notification_url or ():
        try:
            parse_prefix(url)
        except UrlRefusedError as error:
            raise typer.BadParameter(f"{url!r}: {error}", param_hint="--allow-notification-url") from error
    targets = None
    if notifications_config is not None:
        try:
            targets = notifications_config.read_text()
        except OSError as error:
            raise typer.BadParameter(str(error), param_hint="--notifications-config") from error
    if shard >= shards:
        raise typer.BadParameter(f"must be below --shards ({shards}), got {shard}", param_hint="--shard")
    if shards > 1 and election is None:
        raise typer.BadParameter(
            "more than one shard needs leader election, not --leader-election off (each shard's Lease is "
            "BASE-shard-I-of-N)",
            param_hint="--shards",
        )
    api_client = load_config(str(kubeconfig) if kubeconfig else None, connections=api_connections(workers))
    options = OperatorOptions(
        workers=workers,
        resync_seconds=resync,
        metrics_port=metrics_port,
        prometheus_url=prometheus_url,
        allowed_prometheus_urls=tuple(allow_prometheus_url or ()),
        pod_url_template=pod_url_template,
        leader_election=election,
        shard=Shard(shard, shards),
        template_policy=template_policy,
        inference_pools=inference_pools,
        notification_targets=targets,
        namespace_notifications=namespace_notifications,
        allowed_notification_urls=tuple(allow_notification_url or ()),
        notification_policy=DeliveryPolicy(attempts=notification_attempts, timeout=notification_timeout),
    )
    controller = Controller(Kube(api_client), options)
    kopf.run(
        registry=controller.registry(),
        standalone=True,
        clusterwide=not namespace,
        namespaces=namespace or (),
        liveness_endpoint=liveness or None,
    )


def _pod_namespace() -> str | None:
    """The namespace of the pod this runs in (its ServiceAccount's), None outside a pod."""
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip() or None
    except OSError:
        return None
