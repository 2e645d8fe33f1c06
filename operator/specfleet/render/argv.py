"""The `vllm serve` command line: a list of argv elements, never a shell string."""

import json

from specfleet.api.problems import InvalidSpecError, Problem
from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.render.speculative import speculative_config, speculative_problems, to_json
from specfleet.render.vllm_versions import VllmVersion, has_flag, version_problem

VLLM_PORT = 8000
ITL_BUCKETS_FLAG = "--custom-histogram-buckets"
BUCKETS_PER_OCTAVE = 12
FINE_ITL_BUCKETS = [
    float(f"{0.0005 * 2 ** (i / BUCKETS_PER_OCTAVE):.3g}") for i in range(9 * BUCKETS_PER_OCTAVE + 1)
] + [0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0]
"""Bounds of vLLM's `inter_token_latency` histogram family, which also buckets the per-request time per
output token the latency guardrail judges: 12 per octave (each bucket 6% wide) from 0.5 ms to 256 ms, then
vLLM's coarse tail. Per-token latency under speculation is 1-10 ms, where vLLM's default first bucket
(0-10 ms) holds everything; a 10% regression needs buckets narrower than 10% to be resolved rather than
interpolated. The price is about 115 series per pod for each of the two histograms."""


def served_model_name(spec: SpeculativeDeploymentSpec) -> str:
    """The `model_name` label of every vLLM metric, and the name clients ask for."""
    return spec.model.served_model_name or spec.model.name


def engine_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """What the engine version in the image would refuse (see `speculative_problems`)."""
    version = VllmVersion.parse(spec.engine.vllm_version)
    problem = version_problem(version)
    if problem:
        return [problem]
    return speculative_problems(spec.speculative, version)


def vllm_argv(spec: SpeculativeDeploymentSpec) -> list[str]:
    """`vllm serve <model> ...`; raises InvalidSpecError when the vLLM version would refuse the config."""
    problems = engine_problems(spec)
    if problems:
        raise InvalidSpecError(problems)
    version = VllmVersion.parse(spec.engine.vllm_version)
    engine = spec.engine
    argv = [
        "vllm",
        "serve",
        spec.model.name,
        "--host",
        "0.0.0.0",
        "--port",
        str(VLLM_PORT),
        "--served-model-name",
        served_model_name(spec),
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--gpu-memory-utilization",
        str(engine.gpu_memory_utilization),
        "--dtype",
        engine.dtype.value,
    ]
    optional = {
        "--revision": spec.model.revision,
        "--max-model-len": engine.max_model_len,
        "--max-num-seqs": engine.max_num_seqs,
        "--quantization": engine.quantization,
    }
    for flag, value in optional.items():
        if value is not None:
            argv += [flag, str(value)]
    config = speculative_config(spec.speculative, version)
    if config is not None:
        argv += ["--speculative-config", to_json(config)]
    if has_flag(ITL_BUCKETS_FLAG, version) and not any(a.startswith(ITL_BUCKETS_FLAG) for a in engine.extra_args):
        argv += [
            ITL_BUCKETS_FLAG,
            json.dumps({"inter_token_latency": FINE_ITL_BUCKETS}, separators=(",", ":")),
        ]
    return argv + list(engine.extra_args)
