"""A fleet's GPU memory budget from its spec: what validation checks before the pods exist, and what the
preflight Job checks again on the sizes measured from the files."""

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.hardware import BY_PRODUCT_NAME
from specfleet.preflight.check import Memory


def gpu_budget(spec: SpeculativeDeploymentSpec) -> Memory | None:
    """The declared weights against the budget of the smallest accepted GPU (vram x gpuMemoryUtilization), or
    None when no known product is named: the pods may land on any GPU."""
    products = [BY_PRODUCT_NAME[n] for n in spec.accelerator.product_names if n in BY_PRODUCT_NAME]
    if not products:
        return None
    smallest = min(products, key=lambda p: p.vram_gib)
    return Memory(
        gpu=smallest.short_name,
        budget_gib=smallest.vram_gib * spec.engine.gpu_memory_utilization,
        tensor_parallel_size=spec.engine.tensor_parallel_size,
        draft_tensor_parallel_size=spec.speculative.draft_tensor_parallel_size or 1,
        target_gib=spec.model.size_gib,
        drafter_gib=spec.speculative.size_gib,
    )
