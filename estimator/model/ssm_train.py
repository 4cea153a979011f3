"""The Mamba2 mixer's training forward through transformers 5.17's torch fallback, as the tensors autograd saves
and the backward nodes it builds (estimator/model/autograd_replay.py runs the backward). Read from
transformers/models/mamba2/modeling_mamba2.py (`Mamba2Mixer.forward` with `self.training` and no cache: the fused
`mamba2_split_conv1d_scan_combined` returns None without mamba-ssm, so the same `causal_conv1d_fn`,
`mamba2_chunk_scan` and `MambaRMSNormGated` run as at inference, now recording their graph). Falcon-H1's and
Bamba's mixers carry the same functions; Falcon-H1 adds its muP multipliers and, without `mamba_rms_norm`, gates
with `y * silu(gate)`.

What dominates (fp32, b sequences, c chunks of l tokens, h heads of head_dim P, state n): the backward of each
broadcast product allocates the product-sized gradient of both its inputs before reducing them, so the C·B
product (b, c, l, l, h, n) and the M·x product (b, c, l, l, h, P) each need two tensors of their size at their
backward; the forward saves the chunked x, B, C, the (b, h, c, l, l) masks' results L, G and M, and the
(b, c + 1, h, P, n) chunk states.

The A_log / D / dt_bias chains are (heads,)-sized and priced as leaves; parameter gradients are in the model dtype
(bf16-true: transformers' model.to(bfloat16)).
"""

from __future__ import annotations

from estimator.model.autograd_replay import CUMSUM, MUL, NEW, VIEW, Graph
from estimator.model.ssm_mamba2 import F32, MambaMixerShape
from estimator.units import cdiv


def segment_sum_train(g: Graph, src: str, rows: int, l: int, out: str) -> None:
    """exp(segment_sum(src)) for src of `rows` × l fp32 elements -> `out` (rows × l × l): the expand, two
    masked_fills (saving only their bool masks), the cumsum, then exp (saving its result)."""
    big = rows * l * l * F32
    g.op("ss_in", big, (src,), kind=NEW, view_of=src, grad_bytes={src: rows * l * F32})  # expand: sum in backward
    g.tensor("ss_mask", l * l)
    g.op("ss1", big, ("ss_in",), kind=NEW, saves=("ss_mask",))
    g.drop("ss_in", "ss_mask")
    g.op("ss2", big, ("ss1",), kind=CUMSUM)
    g.tensor("ss_mask", l * l)
    g.op("ss3", big, ("ss2",), kind=NEW, saves=("ss_mask",))
    g.drop("ss2", "ss_mask", "ss1")
    g.op(out, big, ("ss3",), kind=NEW)
    g.drop("ss3")


def chunk_scan_train(g: Graph, s: MambaMixerShape, b: int, L: int, es: int, x: str, dt: str, B: str, C: str,
                     A: str, D: str, dt_bias: str) -> str:
    """mamba2_chunk_scan(x, dt, A, B, C, chunk, D, dt_bias, dt_softplus=True) with autograd; returns the name of
    its output (b, L, heads·head_dim) fp32 (a view of the padded storage)."""
    h, P, n, G, l = s.heads, s.head_dim, s.state, s.groups, s.chunk
    c = cdiv(L, l)
    Lp = c * l
    bl, blp = b * L, b * Lp
    pad = Lp != L
    g.op("dt1", bl * h * es, (dt, dt_bias), kind=VIEW, kinds={dt_bias: NEW}, grad_bytes={dt_bias: h * es})
    g.op("dt2", bl * h * es, ("dt1",), kind=NEW, saves=("dt1",))  # softplus
    g.drop("dt1")
    g.op("dt3", bl * h * es, ("dt2",), kind=NEW, saves=("dt2",))  # clamp(min, max)
    g.drop("dt2")
    g.op("x32", bl * h * P * F32, (x,), kind=NEW, grad_bytes={x: bl * h * P * es})  # .float()
    for name in (B, C):  # .float().repeat_interleave(h // G, dim=2): expand (a sum in backward) + clone
        g.op(name + "32", bl * G * n * F32, (name,), kind=NEW, grad_bytes={name: bl * G * n * es})
        g.op(name + "h", bl * h * n * F32, (name + "32",), kind=NEW, grad_bytes={name + "32": bl * G * n * F32})
        g.drop(name + "32")
    Bh, Ch = B + "h", C + "h"
    g.op("pad_x", blp * h * P * F32, ("x32",), kind=NEW, grad_bytes={"x32": bl * h * P * F32})
    g.op("D_res", blp * h * P * F32, (D, "pad_x"), kind=MUL, saves=(D, "pad_x"), grad_bytes={D: h * es})
    g.drop("pad_x")
    g.op("dt32", bl * h * F32, ("dt3",), kind=NEW, grad_bytes={"dt3": bl * h * es})  # dt[..., None].float()
    g.op("xdt", bl * h * P * F32, ("x32", "dt32"), kind=MUL, saves=("x32", "dt32"),
         grad_bytes={"dt32": bl * h * F32})
    g.drop("dt32", "x32")
    g.op("dt32", bl * h * F32, ("dt3",), kind=NEW, grad_bytes={"dt3": bl * h * es})  # dt.float()
    g.op("Adt", bl * h * F32, (A, "dt32"), kind=MUL, saves=(A, "dt32"), grad_bytes={A: h * F32})
    g.drop("dt32")
    # reshape_into_chunks: a pad (a copy, even of size 0) then a reshape, for each of x, A, B, C
    for src, out, w in (("xdt", "xc", h * P), ("Adt", "Ac", h), (Bh, "Bc", h * n), (Ch, "Cc", h * n)):
        g.op(out, blp * w * F32, (src,), kind=NEW, grad_bytes={src: bl * w * F32})
    g.drop("xdt", "Adt", Bh, Ch)
    g.op("A_cumsum", blp * h * F32, ("Ac",), kind=CUMSUM)
    segment_sum_train(g, "Ac", b * h * c, l, "Lm")
    g.save_result("Lm")
    g.op("G_prod", blp * l * h * n * F32, ("Cc", "Bc"), kind=MUL, saves=("Cc", "Bc"))
    g.op("Gm", blp * l * h * F32, ("G_prod",), kind=VIEW, cls=("reduce_last", n))  # .sum(-1)
    g.drop("G_prod")
    g.op("M_prod", blp * l * h * F32, ("Gm", "Lm"), kind=MUL, saves=("Gm", "Lm"))
    g.op("Mm", blp * l * h * F32, ("M_prod",), kind=VIEW)
    g.drop("M_prod")
    g.op("Y_prod", blp * l * h * P * F32, ("Mm", "xc"), kind=MUL, saves=("Mm", "xc"))
    g.op("Y_diag", blp * h * P * F32, ("Y_prod",), kind=VIEW)
    g.drop("Y_prod")
    g.op("dsub", blp * h * F32, ("A_cumsum",), kind=NEW)  # A_cumsum[..., -1:] - A_cumsum
    g.op("decay_states", blp * h * F32, ("dsub",), kind=NEW)
    g.save_result("decay_states")
    g.drop("dsub")
    g.op("B_decay", blp * h * n * F32, ("Bc", "decay_states"), kind=MUL, saves=("Bc", "decay_states"),
         grad_bytes={"decay_states": blp * h * F32})
    g.op("S_prod", blp * h * P * n * F32, ("B_decay", "xc"), kind=MUL, saves=("B_decay", "xc"))
    g.op("S", b * c * h * P * n * F32, ("S_prod",), kind=VIEW)
    g.drop("S_prod")
    g.tensor("prev", b * h * P * n * F32)  # zeros_like(states[:, :1])
    g.op("S_cat", b * (c + 1) * h * P * n * F32, ("prev", "S"), kind=VIEW, kinds={"S": NEW},
         grad_bytes={"S": b * c * h * P * n * F32})
    g.drop("S", "prev")
    # decay_chunk = exp(segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0)))).transpose(1, 3)
    g.op("A_last", b * h * c * F32, ("A_cumsum",), kind=NEW, view_of="A_cumsum",
         grad_bytes={"A_cumsum": blp * h * F32})  # select: select_backward allocates A_cumsum's size
    g.op("pad_A", b * h * (c + 1) * F32, ("A_last",), kind=NEW, grad_bytes={"A_last": b * h * c * F32})
    g.drop("A_last")
    segment_sum_train(g, "pad_A", b * h, c + 1, "decay_chunk")
    g.save_result("decay_chunk")
    g.drop("pad_A")
    cc = b * (c + 1) ** 2 * h * F32
    g.op("N_prod", cc * P * n, ("decay_chunk", "S_cat"), kind=MUL, saves=("decay_chunk", "S_cat"),
         grad_bytes={"decay_chunk": cc, "S_cat": b * (c + 1) * h * P * n * F32})
    g.op("new_states", b * (c + 1) * h * P * n * F32, ("N_prod",), kind=VIEW)
    g.drop("N_prod", "S_cat", "decay_chunk")
    g.op("states", b * c * h * P * n * F32, ("new_states",), kind=NEW, view_of="new_states",
         grad_bytes={"new_states": b * (c + 1) * h * P * n * F32})  # new_states[:, :-1]: slice_backward
    g.op("sdo", blp * h * F32, ("A_cumsum",), kind=NEW)
    g.save_result("sdo")
    g.op("CTS", blp * h * P * n * F32, ("Cc", "states"), kind=MUL, saves=("Cc", "states"))
    g.op("CTS_sum", blp * h * P * F32, ("CTS",), kind=VIEW, cls=("reduce_last", n))
    g.op("Y_off", blp * h * P * F32, ("CTS_sum", "sdo"), kind=MUL, saves=("CTS_sum", "sdo"),
         grad_bytes={"sdo": blp * h * F32})
    g.drop("CTS_sum")
    g.op("out", blp * h * P * F32, ("Y_diag", "Y_off"), kind=VIEW)
    g.op("out2", blp * h * P * F32, ("out", "D_res"), kind=VIEW)
    g.drop("out")
    if pad:  # output[:, :sequence_length]: a view; its backward allocates the padded size
        g.op("scan_out", bl * h * P * F32, ("out2",), kind=NEW, view_of="out2",
             grad_bytes={"out2": blp * h * P * F32})
        g.drop("out2")
    else:
        g.rename("out2", "scan_out")
    # the function returns: every local but the output dies (C_times_states included)
    g.drop("dt3", "D_res", "xc", "Ac", "Bc", "Cc", "A_cumsum", "Lm", "Gm", "Mm", "Y_diag", "decay_states",
           "B_decay", "new_states", "states", "sdo", "CTS", "Y_off")
    return "scan_out"


def mixer_train(g: Graph, s: MambaMixerShape, b: int, L: int, es: int, x: str, layer: int) -> str:
    """Mamba2Mixer.forward in training (no cache) on the tensor named `x` (b, L, hidden) in the model dtype;
    returns the name of its output (b, L, hidden)."""
    bl, I = b * L, s.intermediate
    pfx = f"m{layer}."
    for name, size in (("A", s.heads * F32), ("D", s.heads * es), ("dt_bias", s.heads * es)):
        g.tensor(pfx + name, size, grad=True)  # (heads,) leaves: A = -exp(A_log.float())
    src = x
    if s.in_multiplier:  # Falcon-H1: hidden_states * ssm_in_multiplier
        g.op("x_in", bl * s.hidden * es, (x,), kind=NEW)
        src = "x_in"
    g.op("proj", bl * s.projection * es, (src,), kind=NEW, saves=(src,),
         params=((pfx + "in_proj", s.hidden * s.projection * es),), gemm=(bl, s.projection, s.hidden))
    if s.in_multiplier:  # projected_states * mup_vector (a buffer)
        g.op("proj_mup", bl * s.projection * es, ("proj",), kind=NEW)
        g.drop("proj", "x_in")
        g.rename("proj_mup", "proj")
    g.split("proj", {"gate": bl * I * es, "xBC_in": bl * s.conv_dim * es, "dt_in": bl * s.heads * es})
    K = s.conv_kernel
    g.op("conv_out", b * s.conv_dim * (L + K - 1) * es, ("xBC_in",), kind=NEW, saves=("xBC_in",),
         params=((pfx + "conv1d", s.conv_dim * (K + s.conv_bias) * es),))
    g.op("conv_sl", bl * s.conv_dim * es, ("conv_out",), kind=NEW, view_of="conv_out",
         grad_bytes={"conv_out": b * s.conv_dim * (L + K - 1) * es})  # [:, :, :seq_len]
    g.drop("conv_out")
    g.op("xBC", bl * s.conv_dim * es, ("conv_sl",), kind=NEW, saves=("conv_sl",))  # silu
    g.drop("conv_sl", "xBC_in")
    gs = bl * s.groups * s.state * es
    g.split("xBC", {"xs": bl * I * es, "Bs": gs, "Cs": gs})  # transpose(1, 2), then torch.split
    out = chunk_scan_train(g, s, b, L, es, "xs", "dt_in", "Bs", "Cs", pfx + "A", pfx + "D", pfx + "dt_bias")
    g.drop("xs", "Bs", "Cs", "dt_in", "xBC")
    i32 = bl * I * F32
    if s.gate == "silu":  # Falcon-H1 without mamba_rms_norm: scan_output * silu(gate) (silu in dtype)
        g.op("sg", bl * I * es, ("gate",), kind=NEW, saves=("gate",))
        g.op("gated", i32, (out, "sg"), kind=MUL, saves=(out, "sg"), grad_bytes={"sg": bl * I * es})
        g.drop("sg")
    else:  # MambaRMSNormGated(scan_output (fp32), gate)
        g.op("g32", i32, ("gate",), kind=NEW, grad_bytes={"gate": bl * I * es})
        g.op("sg", i32, ("g32",), kind=NEW, saves=("g32",))
        g.drop("g32")
        g.op("h1", i32, (out, "sg"), kind=MUL, saves=(out, "sg"))
        g.drop("sg")
        _rms_core(g, "h1", "h2", bl, I)
        g.drop("h1")
        g.op("gated", i32, ("h2",), kind=NEW, saves=("h2",), params=((pfx + "norm", I * es),))  # weight · h
        g.drop("h2")
    g.drop(out, "gate")
    g.op("cast", bl * I * es, ("gated",), kind=NEW, grad_bytes={"gated": i32})  # .to(dtype)
    g.drop("gated")
    mixer_out = f"mixer_out{layer}"
    g.op(mixer_out, bl * s.hidden * es, ("cast",), kind=NEW, saves=("cast",),
         params=((pfx + "out_proj", I * s.hidden * es),), gemm=(bl, s.hidden, I))
    g.drop("cast", "proj")
    if s.out_multiplier:
        g.op(mixer_out + "s", bl * s.hidden * es, (mixer_out,), kind=NEW)
        g.drop(mixer_out)
        g.rename(mixer_out + "s", mixer_out)
    g.drop(pfx + "A", pfx + "D", pfx + "dt_bias")
    return mixer_out


def _rms_core(g: Graph, x: str, out: str, rows: int, width: int) -> None:
    """x (fp32) * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) -> `out` (fp32): pow saves x, rsqrt its result,
    the product x and rsqrt. The mean's backward allocates x's size (expand + div)."""
    g.op("npow", rows * width * F32, (x,), kind=NEW, saves=(x,))
    g.op("nmean", rows * F32, ("npow",), kind=NEW, grad_bytes={"npow": rows * width * F32})
    g.drop("npow")
    g.op("neps", rows * F32, ("nmean",), kind=VIEW)
    g.drop("nmean")
    g.op("nrs", rows * F32, ("neps",), kind=NEW)
    g.save_result("nrs")
    g.drop("neps")
    g.op(out, rows * width * F32, (x, "nrs"), kind=MUL, saves=(x, "nrs"), grad_bytes={"nrs": rows * F32})
    g.drop("nrs")
