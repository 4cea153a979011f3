"""GPU catalog: memory, bandwidth, dense peak FLOP/s per dtype, compute capability, each with a source.

Peaks are dense (without 2:4 sparsity). `float32` is the plain (non-tensor-core) rate: PyTorch keeps
TF32 off for matmuls by default (`torch.backends.cuda.matmul.allow_tf32 = False`), so fp32 GEMMs,
the math backend's upcast GEMMs included, run at that rate. fp16/bf16 peaks are with fp32
accumulation, which is what PyTorch's kernels use.

`memory_bytes` is `torch.cuda.get_device_properties(i).total_memory` (= cudaDeviceProp.totalGlobalMem)
where it was read; otherwise PyTorch's out-of-memory message "total capacity of X GiB" (0.01 GiB
precision) or the datasheet, as each row's `memory_source` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from estimator.units import GIB, MIB

TFLOPS = 10**12
GBPS = 10**9


@dataclass(frozen=True, kw_only=True)
class GPU:
    name: str
    label: str
    memory_bytes: int
    hbm_bytes_per_s: int
    peak_flops_per_s: dict[str, int] = field(hash=False)  # dense, per dtype name
    compute_capability: tuple[int, int]
    sm_count: int
    memory_source: str
    source: str
    # Links, bytes/s per GPU per direction (datasheets give bidirectional totals: halved here). nvlink_domain: GPUs
    # one NVLink/NVSwitch fabric joins (8 on HGX boards, 2 with a bridge, 0 without NVLink); network: the
    # inter-node (InfiniBand/RoCE) bandwidth per GPU of the reference server named in link_source.
    nvlink_bytes_per_s: int = 0
    nvlink_domain: int = 0
    pcie_bytes_per_s: int = 16 * GBPS
    network_bytes_per_s: int = 25 * GBPS
    link_source: str = "assumed: PCIe Gen4 x16 (32 GB/s per direction), one 200 Gb/s NIC per GPU"

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0 or self.hbm_bytes_per_s <= 0 or self.sm_count <= 0:
            raise ValueError(f"{self.name}: memory, bandwidth and SM count must be positive")
        if set(self.peak_flops_per_s) != {"float16", "bfloat16", "float32"}:
            raise ValueError(f"{self.name}: peak_flops_per_s needs float16, bfloat16 and float32")

    @property
    def sm(self) -> int:
        """Compute capability as one number, e.g. 90 for sm90."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]


def _gib_to_bytes(value: float) -> int:
    """A GiB figure (as a datasheet or OOM message prints it) in bytes, rounded to whole MiB."""
    return int(round(value * GIB / MIB)) * MIB


def _peaks(half_tflops: float, fp32_tflops: float, bf16: bool = True) -> dict[str, int]:
    half = int(half_tflops * TFLOPS)
    return {"float16": half, "bfloat16": half if bf16 else int(fp32_tflops * TFLOPS),
            "float32": int(fp32_tflops * TFLOPS)}


_HOPPER = "NVIDIA H100/H200 datasheets (dense Tensor Core rates = half the with-sparsity figures)"
_AMPERE = "NVIDIA A100 datasheet (dense rates)"
_HGX_H = ("NVIDIA H100/H200 SXM datasheets: NVLink 900 GB/s, PCIe Gen5 128 GB/s (bidirectional); DGX H100/H200: "
          "8x 400 Gb/s ConnectX-7 (50 GB/s per GPU)")
_H100_PCIE = ("NVIDIA H100 PCIe datasheet: NVLink bridge 600 GB/s (pairs), PCIe Gen5 128 GB/s (bidirectional); "
              "network assumed 200 Gb/s per GPU")
_HGX_A = ("NVIDIA A100 datasheet: NVLink 600 GB/s, PCIe Gen4 64 GB/s (bidirectional); DGX A100: 8x 200 Gb/s "
          "HDR InfiniBand (25 GB/s per GPU)")
_PCIE4 = "datasheet: PCIe Gen4 x16 64 GB/s bidirectional, no NVLink; network assumed 200 Gb/s per GPU"

CATALOG: dict[str, GPU] = {g.name: g for g in (
    GPU(name="h200", label="NVIDIA H200 SXM 141GB", memory_bytes=150_109_880_320,
        hbm_bytes_per_s=4800 * GBPS, peak_flops_per_s=_peaks(989.4, 66.9), compute_capability=(9, 0),
        sm_count=132, memory_source="torch total_memory read on an H200 (torch 2.11)", source=_HOPPER,
        nvlink_bytes_per_s=450 * GBPS, nvlink_domain=8, pcie_bytes_per_s=64 * GBPS,
        network_bytes_per_s=50 * GBPS, link_source=_HGX_H),
    GPU(name="h100-sxm", label="NVIDIA H100 SXM5 80GB", memory_bytes=_gib_to_bytes(79.11),
        hbm_bytes_per_s=3350 * GBPS, peak_flops_per_s=_peaks(989.4, 66.9), compute_capability=(9, 0),
        sm_count=132, memory_source="PyTorch OOM message 'total capacity of 79.11 GiB'", source=_HOPPER,
        nvlink_bytes_per_s=450 * GBPS, nvlink_domain=8, pcie_bytes_per_s=64 * GBPS,
        network_bytes_per_s=50 * GBPS, link_source=_HGX_H),
    GPU(name="h100-pcie", label="NVIDIA H100 PCIe 80GB", memory_bytes=_gib_to_bytes(79.11),
        hbm_bytes_per_s=2000 * GBPS, peak_flops_per_s=_peaks(756.5, 51.2), compute_capability=(9, 0),
        sm_count=114, memory_source="assumed equal to H100 SXM (same 80 GB HBM part)", source=_HOPPER,
        nvlink_bytes_per_s=300 * GBPS, nvlink_domain=2, pcie_bytes_per_s=64 * GBPS,
        network_bytes_per_s=25 * GBPS, link_source=_H100_PCIE),
    GPU(name="a100-80gb", label="NVIDIA A100 SXM4 80GB", memory_bytes=_gib_to_bytes(79.15),
        hbm_bytes_per_s=2039 * GBPS, peak_flops_per_s=_peaks(312, 19.5), compute_capability=(8, 0),
        sm_count=108, memory_source="PyTorch OOM message 'total capacity of 79.15 GiB'", source=_AMPERE,
        nvlink_bytes_per_s=300 * GBPS, nvlink_domain=8, pcie_bytes_per_s=32 * GBPS,
        network_bytes_per_s=25 * GBPS, link_source=_HGX_A),
    GPU(name="a100-40gb", label="NVIDIA A100 SXM4 40GB", memory_bytes=42_298_834_944,
        hbm_bytes_per_s=1555 * GBPS, peak_flops_per_s=_peaks(312, 19.5), compute_capability=(8, 0),
        sm_count=108, memory_source="deviceQuery totalGlobalMem (bottlerocket-os/bottlerocket#3873)",
        source=_AMPERE,
        nvlink_bytes_per_s=300 * GBPS, nvlink_domain=8, pcie_bytes_per_s=32 * GBPS,
        network_bytes_per_s=25 * GBPS, link_source=_HGX_A),
    GPU(name="l40s", label="NVIDIA L40S 48GB", memory_bytes=_gib_to_bytes(44.52),
        hbm_bytes_per_s=864 * GBPS, peak_flops_per_s=_peaks(362.05, 91.6), compute_capability=(8, 9),
        sm_count=142, memory_source="PyTorch OOM message 'total capacity of 44.52 GiB'",
        source="NVIDIA L40S datasheet (dense FP16/BF16 with FP32 accumulate)",
        pcie_bytes_per_s=32 * GBPS, link_source=_PCIE4),
    GPU(name="l4", label="NVIDIA L4 24GB", memory_bytes=_gib_to_bytes(22.03),
        hbm_bytes_per_s=300 * GBPS, peak_flops_per_s=_peaks(121, 30.3), compute_capability=(8, 9),
        sm_count=58, memory_source="PyTorch OOM message 'total capacity of 22.03 GiB'",
        source="NVIDIA L4 datasheet (242 TFLOPS FP16 with sparsity)",
        pcie_bytes_per_s=32 * GBPS, link_source=_PCIE4),
    GPU(name="a10g", label="NVIDIA A10G 24GB", memory_bytes=_gib_to_bytes(21.99),
        hbm_bytes_per_s=600 * GBPS, peak_flops_per_s=_peaks(70, 31.2), compute_capability=(8, 6),
        sm_count=80, memory_source="PyTorch OOM message 'total capacity of 21.99 GiB'",
        source="AWS G5 documentation; tensor rate is an estimate (A10 datasheet is 125 TFLOPS at higher clocks)",
        pcie_bytes_per_s=32 * GBPS,
        network_bytes_per_s=12 * GBPS, link_source=_PCIE4
        + '; AWS g5.48xlarge: 100 Gb/s for 8 GPUs (12 GB/s per GPU assumed for a cluster node)'),
    GPU(name="rtx-4090", label="NVIDIA GeForce RTX 4090 24GB", memory_bytes=_gib_to_bytes(23.68),
        hbm_bytes_per_s=1008 * GBPS, peak_flops_per_s=_peaks(165.2, 82.6), compute_capability=(8, 9),
        sm_count=128, memory_source="PyTorch OOM message '23.68 GiB total capacity' (zai-org/CogVideo#36)",
        source="NVIDIA Ada Lovelace whitepaper, FP16 tensor with FP32 accumulate",
        pcie_bytes_per_s=32 * GBPS, link_source=_PCIE4 + '; no NVLink on the RTX 4090 (Ada whitepaper)'),
    GPU(name="rtx-3090", label="NVIDIA GeForce RTX 3090 24GB", memory_bytes=_gib_to_bytes(23.69),
        hbm_bytes_per_s=936 * GBPS, peak_flops_per_s=_peaks(71, 35.6), compute_capability=(8, 6),
        sm_count=82, memory_source="PyTorch OOM message 'total capacity of 23.69 GiB'",
        source="NVIDIA Ampere GA102 whitepaper, FP16 tensor with FP32 accumulate",
        nvlink_bytes_per_s=56 * GBPS, nvlink_domain=2, pcie_bytes_per_s=32 * GBPS,
        link_source='NVIDIA RTX 3090 page: NVLink bridge 112.5 GB/s total (2 GPUs); ' + _PCIE4),
    GPU(name="t4", label="NVIDIA T4 16GB", memory_bytes=_gib_to_bytes(14.75),
        hbm_bytes_per_s=320 * GBPS, peak_flops_per_s=_peaks(65, 8.1, bf16=False), compute_capability=(7, 5),
        sm_count=40, memory_source="PyTorch OOM message 'total capacity of 14.75 GiB' (hpcaitech/Open-Sora#697)",
        source="NVIDIA T4 datasheet; no bf16 tensor cores (bf16 listed at the fp32 rate)",
        pcie_bytes_per_s=16 * GBPS,
        link_source='NVIDIA T4 datasheet: PCIe Gen3 x16 32 GB/s bidirectional, no NVLink; network assumed 200 Gb/s'),
    GPU(name="v100", label="NVIDIA V100 SXM2 32GB", memory_bytes=_gib_to_bytes(31.74),
        hbm_bytes_per_s=900 * GBPS, peak_flops_per_s=_peaks(125, 15.7, bf16=False), compute_capability=(7, 0),
        sm_count=80, memory_source="PyTorch OOM message 'total capacity of 31.74 GiB'",
        source="NVIDIA V100 datasheet; no bf16 tensor cores (bf16 listed at the fp32 rate)",
        nvlink_bytes_per_s=150 * GBPS, nvlink_domain=8, pcie_bytes_per_s=16 * GBPS,
        network_bytes_per_s=6 * GBPS,
        link_source='NVIDIA V100 datasheet: NVLink 300 GB/s, PCIe Gen3 32 GB/s (bidirectional); DGX-1: 4x 100 Gb/s '
        'InfiniBand for 8 GPUs'),
)}

ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "4090": "rtx-4090", "3090": "rtx-3090"}


def get_gpu(name: str) -> GPU:
    """Look a GPU up by catalog name (case-insensitive); ValueError listing the known names otherwise."""
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key not in CATALOG:
        raise ValueError(f"gpu: unknown GPU {name!r}; known: {', '.join(CATALOG)}")
    return CATALOG[key]


# Catalog name from torch.cuda.get_device_name(): the first matching substring wins.
DEVICE_NAME_PATTERNS = (("h200", "h200"), ("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"),
                        ("a100-sxm4-40", "a100-40gb"), ("a100-pcie-40", "a100-40gb"), ("a100", "a100-80gb"),
                        ("l40s", "l40s"), ("a10g", "a10g"), ("l4", "l4"), ("4090", "rtx-4090"), ("3090", "rtx-3090"),
                        ("t4", "t4"), ("v100", "v100"))


def gpu_from_device_name(device_name: str) -> str | None:
    """The catalog name of a CUDA device name ('NVIDIA H200' -> 'h200'); None when no pattern matches."""
    lowered = device_name.lower()
    for pattern, name in DEVICE_NAME_PATTERNS:
        if pattern in lowered:
            return name
    return None
