"""The fleet's pods as the dev engines see them, shared by the simulator (`specfleet_workshop.sim`) and real vLLM
(`specfleet_workshop.realvllm`), which know nothing of each other.

`watch` lists and watches pods for a sink, `pods` (pure) reads a pod's `vllm serve` arguments, `targets`
gives Prometheus a pod's file_sd target, `kubelet` runs the preflight Jobs' pods that kwok only pretends to
run (with `tiny_tokenizers` standing in for models this machine lacks), `termination` how an engine's command
serves until it is stopped.
"""
