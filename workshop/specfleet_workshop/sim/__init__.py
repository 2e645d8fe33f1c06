"""`specfleet sim`: a stand-in for vLLM pods that cannot run here, faithful in what Prometheus sees.

Pure core: `model` (the equations), `scenario` (the YAML document and its matching rules), `engine` (one
engine's requests, steps and counters), `exposition` (vLLM's metric names, types and labels), `completions`
(the OpenAI completions protocol). Shell: `simulator` (the pods' engines, file_sd, run-time control),
`routes` (HTTP: metrics, completions, the scenario), `streams` (completions at the engine's pace). What it
shares with real vLLM (`specfleet_workshop.realvllm`), reading and watching pods, is in `specfleet_workshop.fleetpods`;
`specfleet_workshop.cli.sim` is the command.

    from specfleet_workshop.sim import Simulator, load_scenario
    with Simulator(load_scenario(text), file_sd_dir=info.file_sd_dir, api_client=info.api_client(),
                   namespaces=[ns], listen=("127.0.0.1", 0), seed=1) as sim:
        sim.set_scenario(load_scenario(bad))     # same as PUT {sim.url}/scenario
"""

from specfleet_workshop.sim.scenario import Scenario, ScenarioError, load_scenario
from specfleet_workshop.sim.simulator import Simulator

__all__ = ["Scenario", "ScenarioError", "Simulator", "load_scenario"]
