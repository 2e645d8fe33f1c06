"""The simulator's performance model as the load-aware depth sees it: an engine's step times and tokens per step."""

from dataclasses import dataclass

from specfleet.autotune.schedule import LoadPoint
from specfleet.hardware import GpuProduct
from specfleet_workshop.sim import model
from specfleet_workshop.sim.scenario import Defaults

DEFAULTS = Defaults()
"""The simulator's scenario defaults: the knee, the bandwidth efficiency, the typical request."""
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
"""The target model, whose size sets the weights streamed per step."""
KS = tuple(range(6))
"""The depths an engine is compared at (0: no speculation)."""


@dataclass(frozen=True)
class Engine:
    """The user's inputs (GPU, alpha, drafter cost) and what the simulator's model makes of them."""

    gpu: GpuProduct
    alpha: float
    draft_cost: float
    decay: float = 1.0
    tp: int = 1

    @property
    def hardware(self) -> model.Hardware:
        """The simulator's hardware for this GPU and tensor parallelism, at the scenario defaults."""
        assert DEFAULTS.bandwidth_efficiency and DEFAULTS.knee_tokens and DEFAULTS.step_overhead_ms is not None
        return model.Hardware(
            hbm_tbps=self.gpu.hbm_tbps,
            tp=self.tp,
            bandwidth_efficiency=DEFAULTS.bandwidth_efficiency,
            knee_tokens=DEFAULTS.knee_tokens,
            overhead_seconds=DEFAULTS.step_overhead_ms / 1000,
        )

    @staticmethod
    def _load(k: int, batch: int) -> model.StepLoad:
        """A decode step of `batch` requests at depth k, each request with a typical context."""
        assert DEFAULTS.prompt_tokens and DEFAULTS.output_tokens
        context = DEFAULTS.prompt_tokens + DEFAULTS.output_tokens // 2
        return model.StepLoad(decode_requests=batch, spec_tokens=k, prefill_tokens=0, context_tokens=batch * context)

    def step(self, k: int, batch: int) -> float:
        """The simulator's step time before noise."""
        assert DEFAULTS.draft_pass_overhead_ms is not None
        weights = model.weight_bytes(TARGET, None)
        return model.step_seconds(
            self.hardware,
            weights,
            model.kv_bytes_per_token(weights / model.bytes_per_param(TARGET, None)),
            self.draft_cost,
            False,
            self._load(k, batch),
            DEFAULTS.draft_pass_overhead_ms / 1000,
        )

    def per_position(self, k: int) -> tuple[float, ...]:
        """What vLLM's per-position counters / drafts converge to at depth k (every request alike)."""
        return model.expected_drafts(
            self.alpha, 0.0, self.decay, k, model.draft_length_distribution(k, None)
        ).per_position

    def tokens(self, k: int) -> float:
        """Tokens per step at depth k (1 + the expected accepted drafts)."""
        return 1 + model.expected_accepted(model.position_acceptance(self.alpha, self.decay, k))

    def token_latency(self, k: int, batch: int) -> float:
        """Seconds per token at depth k and this batch: step time over tokens per step."""
        return self.step(k, batch) / self.tokens(k)

    def best_k(self, batch: int, ks: tuple[int, ...] = KS) -> int:
        """The depth in `ks` with the lowest per-token latency at this batch."""
        return min(ks, key=lambda k: self.token_latency(k, batch))

    def compute_bound(self, k: int, batch: int) -> bool:
        """Whether the simulator's verifying pass is past the knee (longer than streaming weights and KV cache)."""
        load = self._load(k, batch)
        weights = model.weight_bytes(TARGET, None)
        kv = model.kv_bytes_per_token(weights / model.bytes_per_param(TARGET, None))
        memory = self.hardware.stream_seconds(weights + load.context_tokens * kv)
        return model.target_pass_seconds(self.hardware, weights, kv, load) > memory

    def points(
        self, experiment_batch: int, fleet_k: int, fleet_batches: tuple[int, ...], ks: tuple[int, ...] = KS[1:]
    ) -> list[LoadPoint]:
        """An experiment's candidates (every k in `ks`) at one batch, and the fleet at `fleet_k` over several loads."""
        experiment = [LoadPoint(k, experiment_batch, self.step(k, experiment_batch), 2000) for k in ks]
        fleet = [LoadPoint(fleet_k, b, self.step(fleet_k, b), 20_000) for b in fleet_batches]
        return experiment + fleet
