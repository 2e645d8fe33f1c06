"""specfleet: roll out speculative-decoding configs for vLLM fleets like any risky change."""

__version__ = "0.1.0"
