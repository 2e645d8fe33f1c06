"""`specfleet dev`: a real local control plane with fake AMD Instinct nodes."""

import typer

app = typer.Typer(help="A local Kubernetes control plane with fake AMD Instinct nodes, for demos and tests.")
