"""`specfleet sim` hands its arguments to the command of the engine `--engine` names, each with its own options."""

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet_workshop.cli.sim import engine_command, sim_command, vllm_cpu_command


def test_engine_picks_the_command() -> None:
    assert engine_command(["--engine", "vllm-cpu", "-n", "team-a"]) is vllm_cpu_command
    assert engine_command(["--engine=vllm-cpu"]) is vllm_cpu_command
    assert engine_command(["--scenario", "scenario.yaml"]) is sim_command
    assert engine_command(["--engine", "vllm-cpu", "--engine", "sim"]) is sim_command  # the last one, as click
    assert engine_command(["--engine", "tpu"]) is sim_command  # which reports the bad value


def test_each_engine_lists_only_its_own_options() -> None:
    simulator = CliRunner().invoke(app, ["sim", "--help"])
    real = CliRunner().invoke(app, ["sim", "--engine", "vllm-cpu", "--help"])
    assert simulator.exit_code == real.exit_code == 0
    assert "--scenario" in simulator.output and "--max-servers" not in simulator.output
    assert "--max-servers" in real.output and "--scenario" not in real.output
    assert "--kubeconfig" in simulator.output and "--kubeconfig" in real.output


def test_a_bad_engine_is_refused() -> None:
    result = CliRunner().invoke(app, ["sim", "--engine", "tpu"])
    assert result.exit_code == 2
    assert "tpu" in result.output
