"""Facts about the AMD Instinct GPUs specfleet places vLLM on.

One table, read by validation (memory budgets), the simulator (HBM bandwidth) and the dev cluster
(node labels), so the numbers are written down once. Sources: AMD data sheets and the ROCm
k8s-device-plugin node labeller (see shared/REFERENCE.md section 2).
"""

from dataclasses import dataclass

GPU_RESOURCE = "amd.com/gpu"
PRODUCT_NAME_LABEL = "amd.com/gpu.product-name"
NODE_FEATURE_LABEL = "feature.node.kubernetes.io/amd-gpu"


@dataclass(frozen=True)
class GpuProduct:
    """One AMD Instinct model as the node labeller and the data sheet describe it."""

    short_name: str
    product_name: str  # value of the amd.com/gpu.product-name label
    device_id: str
    family: str
    vram_gib: int
    hbm_tbps: float  # peak HBM bandwidth, TB/s: the decode floor is weight bytes / this
    cu_count: int
    simd_count: int

    def node_labels(self) -> dict[str, str]:
        """The labels AMD's node labeller and NFD put on a node full of this GPU."""
        return {
            PRODUCT_NAME_LABEL: self.product_name,
            "amd.com/gpu.family": self.family,
            "amd.com/gpu.device-id": self.device_id,
            "amd.com/gpu.vram": self.vram_label,
            "amd.com/gpu.cu-count": str(self.cu_count),
            "amd.com/gpu.simd-count": str(self.simd_count),
            NODE_FEATURE_LABEL: "true",
        }

    @property
    def vram_label(self) -> str:
        """The node labeller's `amd.com/gpu.vram` value, e.g. `192G`."""
        return f"{self.vram_gib}G"


MI300X = GpuProduct("MI300X", "AMD_Instinct_MI300X_OAM", "74a1", "AI", 192, 5.3, 304, 1216)
MI325X = GpuProduct("MI325X", "AMD_Instinct_MI325_OAM", "74a5", "AI", 256, 6.0, 304, 1216)
MI355X = GpuProduct("MI355X", "AMD_Instinct_MI355_OAM", "75a3", "AI", 288, 8.0, 256, 1024)

PRODUCTS: tuple[GpuProduct, ...] = (MI300X, MI325X, MI355X)
BY_PRODUCT_NAME: dict[str, GpuProduct] = {p.product_name: p for p in PRODUCTS}
BY_SHORT_NAME: dict[str, GpuProduct] = {p.short_name: p for p in PRODUCTS}
