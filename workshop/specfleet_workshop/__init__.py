"""specfleet's dev tooling: the dev cluster, the simulator, the real vLLM runner, the fake pods, the load test,
the demo and the chart generation. It uses the runtime (`specfleet`); the runtime never imports it."""
