"""Pure rendering: a SpeculativeDeployment to vLLM argv and Kubernetes objects. No I/O here."""
