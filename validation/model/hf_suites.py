"""The built-in suites of `python -m validation.hf_models --suite NAME`: lists of whole-model cases (one dict per
case, the columns of `hf_models.CASE_COLUMNS`). Stdlib only, like hf_models (it runs on the GPU machine)."""

from __future__ import annotations


def _c(family, layers, impl, mode, seq, batch, precision="bf16-true", optimizer="adamw", ckpt="none",
       decode=0, overrides="", no_reset=0):
    return {"family": family, "layers": layers, "attn_implementation": impl, "mode": mode, "precision": precision,
            "optimizer": optimizer, "checkpointing": ckpt, "seq_len": seq, "batch": batch, "decode_tokens": decode,
            "overrides": overrides, "no_reset": no_reset}


def _recipes(families):
    cases = []
    points = [(2048, 1), (4096, 2), (8192, 1)]
    for fam in families:
        # fp32-weight precisions first, then bf16-weight ones: one model build per (family, load dtype)
        for prec in ("bf16-mixed", "16-mixed", "bf16-true", "bf16-master"):
            for ckpt in ("none", "hf"):
                for seq, b in points:
                    cases.append(_c(fam, 2, "sdpa", "train", seq, b, prec, "adamw", ckpt))
    return cases


def _recipes_extra():
    L = "llama-3.1-8b"
    cases = []
    for prec in ("bf16-mixed", "bf16-true"):
        for opt in ("adamw-fused", "sgd", "adamw-8bit"):
            cases.append(_c(L, 2, "sdpa", "train", 4096, 1, prec, opt))
    cases.append(_c(L, 2, "sdpa", "train", 4096, 1, "32-true"))
    cases.append(_c(L, 2, "sdpa", "train", 4096, 1, "16-true"))
    # meant to run out of memory: activations (16 layers, 131k tokens, no checkpointing), and eager attention
    # scores (32 heads x 32768^2, softmax in fp32 = 137 GB)
    cases.append(_c(L, 16, "sdpa", "train", 32768, 4, "bf16-mixed"))
    cases.append(_c(L, 2, "eager", "train", 32768, 1, "bf16-true"))
    return cases


ARCH_LAYERS = {  # smallest count with every kind of layer the family has
    "phi-3-mini-4k": 2, "gemma-2-9b": 2,            # gemma2: sliding, full
    "gemma-3-12b": 6,                              # 5 local : 1 global (pattern 6): 4 layers would be all local
    "mixtral-8x7b": 2, "qwen3-30b-a3b": 2,
    "deepseek-v2-lite": 2,                         # first_k_dense_replace=1: one dense + one MoE layer
    "gpt-oss-20b": 2,                              # sliding(128), full
}
# gpt_oss has _supports_sdpa = False in 5.17 (sinks need eager/flex/flash kernels): HF's default is eager.
# Mamba2ForCausalLM has no attention and refuses attn_implementation="sdpa" in 5.17: eager (unused) instead.
ARCH_IMPL = {"gpt-oss-20b": "eager", "mamba2-codestral": "eager"}


def _archs():
    cases = []
    for fam, L in ARCH_LAYERS.items():
        impl = ARCH_IMPL.get(fam, "sdpa")
        for seq in (4096, 16384, 32768):
            cases.append(_c(fam, L, impl, "prefill", seq, 1, decode=8 if seq == 4096 else 0))
        for seq in (4096, 8192):
            cases.append(_c(fam, L, impl, "train", seq, 1, "bf16-mixed"))
    return cases


WINDOW_LAYERS = {"mistral-7b-v0.1": 2, "gemma-2-9b": 2, "gemma-3-12b": 6}


def _windows(impls):
    cases = []
    for fam, L in WINDOW_LAYERS.items():
        for impl in impls:
            for seq in (8192, 16384, 32768):
                cases.append(_c(fam, L, impl, "prefill", seq, 1))
            cases.append(_c(fam, L, impl, "train", 8192, 1, "bf16-mixed"))
    return cases


def _no_reset_series():
    # 8 other flex shapes without dynamo reset in between (the first resets, to start from a known state),
    # then 16384: shows whether the recompile limit is hit and HF falls back to unfused flex.
    L = "llama-3.1-8b"
    shapes = [(1024, 1), (1536, 1), (2048, 1), (1024, 2), (3072, 1), (4096, 1), (2048, 2), (6144, 1)]
    cases = [_c(L, 2, "flex_attention", "prefill", s, b, no_reset=int(i > 0)) for i, (s, b) in enumerate(shapes)]
    cases.append(_c(L, 2, "flex_attention", "prefill", 16384, 1, no_reset=1))
    return cases


def _time():
    L = "llama-3.1-8b"
    cases = []
    for layers in (4, 8, 16):
        for seq in (1024, 4096, 16384):
            cases.append(_c(L, layers, "sdpa", "prefill", seq, 1, decode=32))
        for seq in (2048, 8192):
            cases.append(_c(L, layers, "sdpa", "train", seq, 1, "bf16-mixed"))
    for fam in ("qwen2.5-7b", "mixtral-8x7b"):
        for seq in (4096, 16384):
            cases.append(_c(fam, 4, "sdpa", "prefill", seq, 1, decode=32))
    return cases


# Estimated H200 wall time (model init on the GPU takes ~1-3 s per build; a 2-layer 7-8B train step at 8k
# tokens is ~0.2 s, so a train case (4 steps) is ~1-2 s, a prefill case with 3 re-timings ~1 s):
#   recipes   106 train cases, 10 builds            ~3-4 min
#   archs      35 cases, 7 families, 7-14 builds    ~3 min (gpt-oss eager 16k/32k and 8k train: expected OOM)
#   windows-a  24 cases eager+sdpa                  ~2 min (eager at 32k: expected OOM, fast)
#   windows-b  21 flex cases: every flex case recompiles after dynamo.reset (~5-30 s each with inductor's
#              on-disk caches, forward+backward for train)                 ~5-7 min: kept apart for that reason
#   time       19 cases, up to 16-layer llama (4.5B fp32 = 72 GB static) ~3 min
SUITES = {
    "recipes": lambda: _recipes(["llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "phi-3-mini-4k"])
    + _recipes_extra(),
    "archs": _archs,
    "windows-a": lambda: _windows(("eager", "sdpa")),
    "windows-b": lambda: _no_reset_series() + _windows(("flex_attention",)),
    "time": _time,
}
SUITES["windows"] = lambda: SUITES["windows-a"]() + SUITES["windows-b"]()  # > 8 min: run the two halves
