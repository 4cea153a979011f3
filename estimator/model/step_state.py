"""What the passes of one step share (estimator/model/step_time.py's prefill and training passes,
estimator/model/decode_time.py's decode): the plan, its layers' attention, the kernel prices, the compute dtype and
the per-GPU shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.model import layer_passes as passes
from estimator.model.kernel_prices import Kernels
from estimator.units import cdiv

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs


@dataclass(frozen=True)
class Step:
    """What the passes of one step share: the plan, its layers' attention, the kernel prices, the compute dtype
    and the per-GPU shapes (b sequences of n tokens, T = b·n, V the head's width per GPU)."""

    inputs: PlanInputs
    attn: list
    kern: Kernels
    dtype: str
    autocast: bool
    unsupported: bool

    @property
    def training(self) -> bool:
        return self.inputs.mode == "training"

    @property
    def es(self) -> int:
        return passes.element_bytes(self.dtype)

    @property
    def b(self) -> int:
        return self.inputs.batch_per_gpu

    @property
    def T(self) -> int:
        return self.inputs.batch_per_gpu * self.inputs.tokens_per_gpu

    @property
    def V(self) -> int:
        m = self.inputs.model
        return cdiv(m.vocab, self.inputs.tp) if m.kind == "decoder" else m.vocab

    @property
    def rdt(self) -> str:
        """The residual stream's dtype (fp32 under autocast)."""
        return "float32" if self.autocast else self.dtype

    @property
    def backend(self) -> str:
        attn = self.attn
        return attn[-1].timing.selected_backend if attn and not self.unsupported else self.inputs.backend

    def core(self, a, which) -> float:
        """The attention core's time of one layer kind (`which`: timing or forward_timing), per GPU."""
        if self.unsupported:
            return 0.0
        est = getattr(a, which)
        return (est.time_ms or 0.0) / self.inputs.cp if est is not None else 0.0
