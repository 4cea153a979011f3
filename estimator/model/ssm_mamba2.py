"""A Mamba2 mixer as transformers 5.17 runs it WITHOUT the mamba-ssm / causal-conv1d kernels: the reference
PyTorch path (`mamba2_chunk_scan`, `causal_conv1d_fn`, `mamba2_selective_state_update` in
transformers/models/mamba2/modeling_mamba2.py; falcon_h1/modeling_falcon_h1.py and bamba/modeling_bamba.py carry
the same three functions, byte for byte). Pure arithmetic, bytes, per GPU.

Which path runs: `Mamba2Mixer.forward` asks the hub-kernel wrappers (`use_kernel_func_from_hub_with_fallback`);
where mamba-ssm and causal-conv1d are not importable it logs "falling back to its reference PyTorch
implementation" and runs the functions above. Their memory is nothing like the fused kernel's: the chunked scan
materialises broadcast products before each `.sum()`, in fp32 (it calls `.float()` on x, B and C):
  G     (b, chunks, l, l, heads, state)     C·B before summing over the state      l = chunk_size
  Y_diag(b, chunks, l, l, heads, head_dim)  M·x before summing over the chunk
  states(b, chunks, l, heads, head_dim, state) and C_times_states (same shape, kept until the output)
  new_states (b, chunks+1, chunks+1, heads, head_dim, state)   quadratic in the number of chunks
so a 4,096-token prefill of 128 heads × 64 × state 128 needs ~64 GiB for G alone. The fused kernels (not
modelled here) keep none of these: `MambaMixerShape.fast_kernels` is refused by the planner.

`prefill_replay` replays one mixer forward op by op (as `blocks.Replay` does for MoE), the tensors freed when the
Python names holding them are rebound; checked op by op against a storage tracker on CPU (tests/test_hybrid_ssm.py)
and on the H200 (validation/data/h200_hf_hybrid.csv).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.model.blocks import Replay
from estimator.units import cdiv

F32 = 4
GATES = ("gated_rmsnorm", "silu", "rmsnorm")  # after the scan: Mamba2/Bamba MambaRMSNormGated(y, gate);
# Falcon-H1 without mamba_rms_norm: y · silu(gate); Falcon-H1 with it: its gated RMSNorm (as Mamba2)


@dataclass(frozen=True, kw_only=True)
class MambaMixerShape:
    """One Mamba2 mixer (widths in elements). intermediate = heads · head_dim."""

    hidden: int
    heads: int
    head_dim: int
    groups: int
    state: int
    conv_kernel: int
    chunk: int
    gate: str = "gated_rmsnorm"
    in_multiplier: bool = False  # Falcon-H1: hidden · ssm_in_multiplier and projected · mup_vector (new tensors)
    out_multiplier: bool = False  # Falcon-H1: mixer output · ssm_out_multiplier (a new tensor)
    proj_bias: bool = False
    conv_bias: bool = True
    norm: bool = True  # the gated RMSNorm's weight exists (Mamba2, Bamba; Falcon-H1 only with mamba_rms_norm)

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "head_dim", "groups", "state", "conv_kernel", "chunk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 20:
                raise ValueError(f"{name}: expected a whole number in 1..{1 << 20}, got {value!r}")
        if self.heads % self.groups:
            raise ValueError(f"groups: heads ({self.heads}) must be divisible by groups ({self.groups})")
        if self.gate not in GATES:
            raise ValueError(f"gate: unknown value {self.gate!r}; expected one of {', '.join(GATES)}")

    @property
    def intermediate(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise conv: x, B and C (intermediate + 2·groups·state)."""
        return self.intermediate + 2 * self.groups * self.state

    @property
    def projection(self) -> int:
        """in_proj output width: gate (intermediate) + conv channels + dt (heads)."""
        return self.intermediate + self.conv_dim + self.heads

    @property
    def params(self) -> int:
        """in_proj, conv1d (depthwise, kernel conv_kernel), dt_bias, A_log, D, gated norm, out_proj."""
        p = self.hidden * self.projection + self.proj_bias * self.projection
        p += self.conv_dim * self.conv_kernel + self.conv_bias * self.conv_dim
        p += 3 * self.heads + self.norm * self.intermediate
        return p + self.intermediate * self.hidden + self.proj_bias * self.hidden

    def conv_state_bytes(self, b: int, es: int) -> int:
        """The cached conv window: LinearAttentionLayer.lazy_initialization allocates (b, conv_dim, conv_kernel)
        in the dtype of the projected states (transformers 5.17 cache_utils.py)."""
        return b * self.conv_dim * self.conv_kernel * es

    def ssm_state_bytes(self, b: int) -> int:
        """The cached recurrent state: zeros_like(final_state), (b, heads, head_dim, state) in fp32 (the chunked
        scan computes it from x.float(), B.float()), whatever the model dtype."""
        return b * self.heads * self.head_dim * self.state * F32


class Trace(Replay):
    """A Replay that also logs each tensor as one allocator block (`events`: ("alloc", tag, bytes) / ("free",
    tag, 1), the format of estimator/call/allocator.py's replay); a name may hold several tensors, `rename` moves
    them to another name (a Python name rebound to a new result)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: dict[str, list[str]] = {}
        self.events: list[tuple[str, str, int]] = []
        self._count = 0

    def add(self, name: str, nbytes: int) -> None:
        super().add(name, nbytes)
        self._count += 1
        tag = f"{name}#{self._count}"
        self.blocks.setdefault(name, []).append(tag)
        self.events.append(("alloc", tag, nbytes))

    def free(self, *names: str) -> None:
        for name in names:
            for tag in self.blocks.pop(name, ()):
                self.events.append(("free", tag, 1))
        super().free(*names)

    def rename(self, old: str, new: str) -> None:
        if old in self.live:
            self.live[new] = self.live.get(new, 0) + self.live.pop(old)
            self.blocks.setdefault(new, []).extend(self.blocks.pop(old, []))


def chunk_scan_replay(p: Replay, s: MambaMixerShape, b: int, L: int, es: int, *, initial_state: bool = False) -> None:
    """mamba2_chunk_scan(hidden_states, dt, A, B, C, chunk_size, D, dt_bias, dt_softplus=True) op by op. Leaves
    `scan_out` (the fp32 output; its storage is the padded (b, Lp, heads, head_dim)) and `final` (the storage of
    new_states, which the returned final_state views) live; frees every other local."""
    h, P, n, g, l = s.heads, s.head_dim, s.state, s.groups, s.chunk
    c = cdiv(L, l)
    Lp = c * l
    bl, blp = b * L, b * Lp
    p.add("dt1", bl * h * es)  # dt + dt_bias
    p.add("dt2", bl * h * es)  # softplus
    p.free("dt1")
    p.add("dt3", bl * h * es)  # clamp
    p.free("dt2")
    p.add("x32", bl * h * P * F32)  # hidden_states.float()
    for name in ("B", "C"):  # .float() then repeat_interleave to every head (expand + clone)
        p.add(name + "32", bl * g * n * F32)
        p.add(name + "h", bl * h * n * F32)
        p.free(name + "32")
    p.add("pad_x", blp * h * P * F32)  # D_residual = D[..., None] * pad(x)
    p.add("D_res", blp * h * P * F32)
    p.free("pad_x")
    p.add("dt32", bl * h * F32)  # dt[..., None].float()
    p.add("xdt", bl * h * P * F32)
    p.free("dt32", "x32")
    p.add("dt32", bl * h * F32)  # A * dt.float()
    p.add("Adt", bl * h * F32)
    p.free("dt32")
    # reshape_into_chunks pads each of x, A, B, C (a copy); the old four die once the list is built
    p.add("xc", blp * h * P * F32)
    p.add("Ac", blp * h * F32)
    p.add("Bc", blp * h * n * F32)
    p.add("Cc", blp * h * n * F32)
    p.free("xdt", "Adt", "Bh", "Ch")
    p.add("A_cumsum", blp * h * F32)
    _segment_sum(p, b * h * c, l, "L")  # L = exp(segment_sum(A)): (b, h, c, l, l)
    p.add("G_prod", blp * l * h * n * F32)  # C[:, :, :, None] * B[:, :, None]: (b, c, l, l, h, n)
    p.add("G", blp * l * h * F32)
    p.free("G_prod")
    p.add("M_prod", blp * l * h * F32)  # G[..., None] * L.permute(...)[..., None]
    p.add("M", blp * l * h * F32)  # .sum(-1) over the size-1 dim: a copy
    p.free("M_prod")
    p.add("Y_prod", blp * l * h * P * F32)  # M[..., None] * x[:, :, None]: (b, c, l, l, h, P)
    p.add("Y_diag", blp * h * P * F32)
    p.free("Y_prod")
    p.add("dsub", blp * h * F32)  # exp(A_cumsum[..., -1:] - A_cumsum)
    p.add("decay_states", blp * h * F32)
    p.free("dsub")
    p.add("B_decay", blp * h * n * F32)
    p.add("S_prod", blp * h * P * n * F32)  # B_decay[..., None, :] * x[..., None]: (b, c, l, h, P, n)
    p.add("S", b * c * h * P * n * F32)
    p.free("S_prod")
    if initial_state:  # initial_states[:, None].to(states): the cached fp32 state, a view
        pass
    else:
        p.add("prev", b * h * P * n * F32)  # zeros_like(states[:, :1])
    p.add("S_cat", b * (c + 1) * h * P * n * F32)
    p.free("S")
    p.add("pad_A", b * h * (c + 1) * F32)
    _segment_sum(p, b * h, c + 1, "decay_chunk")
    p.free("pad_A")
    p.add("N_prod", b * (c + 1) ** 2 * h * P * n * F32)  # decay_chunk[..., None, None] * states[:, :, None]
    p.add("final", b * (c + 1) * h * P * n * F32)  # new_states; states and final_state are views of it
    p.free("N_prod", "S_cat")
    p.add("sdo", blp * h * F32)  # exp(A_cumsum)
    p.add("CTS", blp * h * P * n * F32)  # C[..., None, :] * states[:, :, None]: kept under its name
    p.add("CTS_sum", blp * h * P * F32)
    p.add("Y_off", blp * h * P * F32)
    p.free("CTS_sum")
    p.add("out", blp * h * P * F32)  # Y_diag + Y_off
    p.add("scan_out", blp * h * P * F32)  # + D_residual
    p.free("out")
    # the function returns: its locals die
    p.free("dt3", "D_res", "xc", "Ac", "Bc", "Cc", "A_cumsum", "L", "G", "M", "Y_diag", "decay_states", "B_decay",
           "prev", "decay_chunk", "sdo", "CTS", "Y_off")


def _segment_sum(p: Replay, rows: int, l: int, keep: str) -> None:
    """exp(segment_sum(x)) for x of `rows` × l fp32 elements: masked_fill, cumsum and the second masked_fill are
    alive together (the first stays bound to `input_tensor` until the function returns), then exp; leaves `keep`."""
    p.add("ss1", rows * l * l * F32)
    p.add("ss2", rows * l * l * F32)
    p.add("ss3", rows * l * l * F32)
    p.free("ss1", "ss2")
    p.add(keep, rows * l * l * F32)
    p.free("ss3")


def prefill_replay(p: Trace, s: MambaMixerShape, b: int, L: int, es: int, *, cache: bool = True,
                   initial_state: bool = False) -> None:
    """One Mamba2Mixer.forward (no grad) above its input, which the caller holds. With `cache`, allocates the
    layer's conv state and ssm state (names `conv_state`, `ssm_state`, kept: the caller frees nothing of them).
    Leaves `mixer_out` (b, L, hidden) in dtype; frees the rest."""
    bl = b * L
    if s.in_multiplier:
        p.add("x_in", bl * s.hidden * es)  # hidden_states * ssm_in_multiplier
    p.add("proj", bl * s.projection * es)  # in_proj: gate, xBC and dt are views of it
    if s.in_multiplier:
        p.add("proj_mup", bl * s.projection * es)  # projected_states * mup_vector
        p.free("proj")
        p.rename("proj_mup", "proj")
        p.free("x_in")
    if cache:
        p.add("conv_state", s.conv_state_bytes(b, es))
    p.add("conv_out", b * s.conv_dim * (L + s.conv_kernel - 1) * es)  # F.conv1d(..., padding=K-1)
    p.add("xBC", bl * s.conv_dim * es)  # silu of the first L positions
    p.free("conv_out")
    chunk_scan_replay(p, s, b, L, es, initial_state=initial_state)
    if cache:
        p.add("ssm_state", s.ssm_state_bytes(b))  # zeros_like(final_state), then copy_
    # scan_output.reshape(b, L, -1) (Falcon-H1: .view) of the sliced padded output merges only (heads, head_dim):
    # a view even when the slice is not contiguous, so the padded storage stays alive, nothing is copied
    i32 = bl * s.intermediate * F32
    if s.gate == "silu":  # scan_output * silu(gate): silu in dtype, the product in fp32
        p.add("silu", bl * s.intermediate * es)
        p.add("gated", i32)
        p.free("silu", "scan_out")
    else:  # MambaRMSNormGated: y * silu(gate.float()), then the RMSNorm in fp32, weight * (fp32 result)
        p.add("g32", i32)
        p.add("sg", i32)
        p.free("g32")
        p.add("h1", i32)
        p.free("sg")
        p.add("pow", i32)
        p.free("pow")
        p.add("h2", i32)
        p.free("h1")
        p.add("gated", i32)
        p.free("h2", "scan_out")
    p.add("cast", bl * s.intermediate * es)  # scan_output.to(dtype)
    p.add("mixer_out", bl * s.hidden * es)  # out_proj
    p.free("cast", "gated", "proj", "xBC", "final")
    if s.out_multiplier:
        p.add("mixer_scaled", bl * s.hidden * es)
        p.free("mixer_out")
        p.rename("mixer_scaled", "mixer_out")


def prefill_peak_bytes(s: MambaMixerShape, b: int, L: int, es: int) -> int:
    """Peak bytes one mixer forward allocates above its input (cache states included)."""
    p = Trace()
    prefill_replay(p, s, b, L, es)
    return p.peak


def decode_replay(p: Trace, s: MambaMixerShape, b: int, es: int) -> None:
    """One cached single-token step (causal_conv1d_update + mamba2_selective_state_update), above the input.
    The per-head state-sized tensors dominate: exp(dt·A), dt·B, dB·x, state·dA, + dBx (fp32), the bf16 copy of
    the new state for the output bmm. Leaves `mixer_out`."""
    st = b * s.heads * s.head_dim * s.state
    p.add("proj", b * s.projection * es)
    p.add("cat", b * s.conv_dim * (s.conv_kernel + 1) * es)  # cat([conv_state, x]) (.to(weight.dtype): same)
    p.add("conv", b * s.conv_dim * 2 * es)
    p.add("xBC", b * s.conv_dim * es)
    p.free("cat", "conv")
    small = b * s.heads * s.head_dim * F32
    p.add("dt", 3 * small)  # dt + dt_bias, softplus, [..., None] (expanded over head_dim: head_dim-wide copies)
    p.add("dA", st * F32)  # exp(dt.float() * A.float()): the product, then exp
    p.add("dA_tmp", st * F32)
    p.free("dA_tmp")
    p.add("Bh", 2 * b * s.heads * s.state * es)  # B expanded to every head (contiguous), C likewise
    p.add("dB", st * F32 if es == F32 else st * es)  # dt * B
    p.add("dBx", st * F32 if es == F32 else st * es)  # dB * x[..., None]
    p.add("sdA", st * F32)  # state * dA
    p.add("new", st * F32)  # + dBx
    p.free("sdA")
    p.add("new16", st * es)  # ssm_states.to(C.dtype) for the bmm (state.copy_ writes the cache in place)
    p.free("new")
    p.add("y", 3 * b * s.intermediate * es)  # bmm, + x·D, (falcon: · silu(z))
    p.free("dA", "dB", "dBx", "new16", "Bh", "dt")
    p.add("gated", 3 * b * s.intermediate * F32)
    p.add("mixer_out", b * s.hidden * es)
    p.free("proj", "xBC", "y", "gated")


def decode_peak_bytes(s: MambaMixerShape, b: int, es: int) -> int:
    p = Trace()
    decode_replay(p, s, b, es)
    return p.peak
