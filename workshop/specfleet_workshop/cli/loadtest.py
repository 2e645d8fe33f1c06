"""`specfleet loadtest`: a load matrix (low / medium / peak concurrency) against OpenAI-compatible servers.

Only typer and the standard library at the top: the client (aiohttp) and matplotlib load when it runs.
"""

from pathlib import Path
from typing import Annotated

import typer

from specfleet.console import make_console

LOADTEST_HELP = """Measure what users feel at low, medium and peak concurrency, before traffic moves.

At each level of --levels, that many clients send streamed completions back to back (a new one as soon as
the last is answered) for --duration seconds or --requests requests, to each target in turn; the figures
are over the requests of that level:

\b
  E2E P50/P95     send to the end of the answer (--max-tokens tokens with --ignore-eos)
  TTFT P50/P95    send to the first chunk carrying text: queueing and prefill
  TOKEN P50/P95   per-output-token latency as a user feels it: (last token - first token) / (tokens - 1),
                  the pace of the stream after its first token (a speculative server sends several tokens
                  per chunk, so this is per token, not per chunk)
  TOKENS/S        output tokens of the answered requests per second of the level (the drain included)
  REQ/S           answered requests per second
  OK / ERR        answered requests / failed ones (connection errors, HTTP errors, error events)

Works against vLLM and the simulator alike (only /v1/models and /v1/completions are used). With the
simulator (`specfleet sim`), a pod is http://127.0.0.1:18000/pods/NS/POD and a track's Ready pods in turn
http://127.0.0.1:18000/tracks/NS/NAME/stable (or /canary).

\b
Example:
  specfleet loadtest --target stable=http://10.0.0.7:8000 --target canary=http://10.0.0.9:8000 \\
      --levels 1,4,16 --duration 30 --plot loadtest.png

Exits 1 when a target cannot be reached or a level answered no request, 2 on bad options."""


def parse_levels(text: str) -> tuple[int, ...]:
    """`1,4,16` -> (1, 4, 16); BadParameter for anything but positive integers."""
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of integers") from error
    if not levels or min(levels) < 1:
        raise typer.BadParameter(f"{text!r}: levels must be integers >= 1")
    return levels


def parse_targets(urls: list[str], targets: list[str]) -> list[tuple[str, str]]:
    """`--url URL` (named `target`, `target-2`, ...) and `--target NAME=URL` -> (name, url) pairs."""
    pairs: list[tuple[str, str]] = []
    for index, url in enumerate(urls):
        pairs.append(("target" if index == 0 else f"target-{index + 1}", url))
    for text in targets:
        name, equals, url = text.partition("=")
        if not equals or not name.strip() or not url.strip():
            raise typer.BadParameter(f"{text!r} is not NAME=URL", param_hint="--target")
        pairs.append((name.strip(), url.strip()))
    for name, url in pairs:
        if not url.startswith(("http://", "https://")):
            raise typer.BadParameter(f"{name}: {url!r} is not an http(s) URL")
    if not pairs:
        raise typer.BadParameter("give at least one --url or --target NAME=URL")
    if len({name for name, _ in pairs}) != len(pairs):
        raise typer.BadParameter("target names must differ", param_hint="--target")
    return pairs


def loadtest_command(
    url: Annotated[
        list[str] | None,
        typer.Option("--url", help="Base URL of an OpenAI-compatible server (http://host:8000, /v1 optional)."),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(help="NAME=URL, repeatable: several targets side by side (stable=..., canary=...)."),
    ] = None,
    levels: Annotated[str, typer.Option(help="Concurrency levels, comma-separated (low, medium, peak).")] = "1,4,16",
    duration: Annotated[float, typer.Option(min=0.1, help="Seconds of load per target and level.")] = 15.0,
    requests: Annotated[
        int | None, typer.Option(min=1, help="Requests per target and level, instead of --duration.")
    ] = None,
    prompt: Annotated[str | None, typer.Option(help="Prompt text; default: a short question.")] = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens per answer.")] = 128,
    model: Annotated[
        str | None, typer.Option(help="Model to ask for; default: the first one the target's /v1/models lists.")
    ] = None,
    ignore_eos: Annotated[
        bool,
        typer.Option(help="Ask for exactly --max-tokens tokens (vLLM's ignore_eos): targets compare like with like."),
    ] = True,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a request may take, answer included.")] = 120.0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the results as JSON instead of a table.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(help="Also write a PNG: per-token latency and tokens/s against concurrency, per target."),
    ] = None,
) -> None:
    from specfleet_workshop.loadtest import LevelResult, LoadPlan, LoadTestError, Target, run_load_test
    from specfleet_workshop.loadtest.driving import DEFAULT_PROMPT
    from specfleet_workshop.loadtest.reporting import PlotError, row, table, to_json
    from specfleet_workshop.loadtest.reporting import plot as write_plot

    out, err = make_console(), make_console(stderr=True)
    try:
        plan = LoadPlan(
            levels=parse_levels(levels),
            duration_seconds=duration,
            requests=requests,
            prompt=prompt or DEFAULT_PROMPT,
            max_tokens=max_tokens,
            model=model,
            ignore_eos=ignore_eos,
            timeout_seconds=timeout,
        )
        targets = [Target(name, address) for name, address in parse_targets(url or [], target or [])]
    except ValueError as error:  # typer.BadParameter is one
        err.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from error

    def progress(result: LevelResult) -> None:
        err.print(f"[dim]{result.target} at {result.concurrency}:[/] " + "  ".join(row(result)[2:]), highlight=False)

    try:
        results = run_load_test(targets, plan, None if json_output else progress)
    except LoadTestError as error:
        err.print(f"[red]error:[/] {error}")
        raise typer.Exit(1) from error
    if json_output:
        typer.echo(to_json(results))
    else:
        out.print(table(results))
        for result in results:
            for example in result.error_examples:
                err.print(f"[yellow]{result.target} at {result.concurrency}:[/] {example}", highlight=False)
    if plot is not None:
        try:
            write_plot(results, plot)
        except PlotError as error:
            err.print(f"[red]error:[/] {error}")
            raise typer.Exit(1) from error
        err.print(f"wrote {plot}")
    empty = [f"{r.target} at {r.concurrency}" for r in results if r.requests == 0]
    if empty:
        err.print(f"[red]error:[/] no request was answered: {', '.join(empty)}")
        raise typer.Exit(1)


loadtest_command.__doc__ = LOADTEST_HELP
