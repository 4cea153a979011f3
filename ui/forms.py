"""Streamlit form widgets shared by the pages. Widgets are keyed; their first values come from the URL.

Pattern: `seed_state(prefix, values)` copies the URL's values into `st.session_state` once per session,
the widgets are created without `value=` (so a re-run never resets them), and the page reads
`read_values(prefix, keys)` after the form. Widgets only collect raw values: validation happens when
the page builds the config, which raises ValueError (shown with st.error).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import streamlit as st

from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS
from estimator.call.registry import BACKENDS
from estimator.hardware import CATALOG
from estimator.model.inputs import FINETUNES, LORA_TARGETS
from estimator.model.recipes import OPTIMIZERS
from ui.state import CALL_MASKS, CALL_MODES, CHECKPOINTING, LOGITS, PLAN_MODES, PRECISION_CHOICES, ZERO_STAGES


def seed_state(prefix: str, url_values: Mapping) -> None:
    """Give each widget its first value: the values this session last used on the page, else the URL's.

    Streamlit drops a widget's state when another page runs, so pages save their values (`save_values`)
    in a key no widget owns and come back to them here."""
    saved = st.session_state.get(f"{prefix}_saved")
    for key, value in (url_values if saved is None else saved).items():
        if f"{prefix}{key}" not in st.session_state:
            st.session_state[f"{prefix}{key}"] = value


def save_values(prefix: str, values: Mapping) -> None:
    st.session_state[f"{prefix}_saved"] = dict(values)


def read_values(prefix: str, keys: Iterable[str]) -> dict:
    return {key: st.session_state[f"{prefix}{key}"] for key in keys if f"{prefix}{key}" in st.session_state}


def _int(label: str, key: str, help: str | None = None) -> None:
    # No min_value: a 0 or a negative number reaches the page, which shows an error naming the field
    # (a clamped widget would silently plan something else).
    st.number_input(label, step=1, key=key, help=help)


def gpu_select(key: str) -> None:
    names = list(CATALOG)
    # the catalog name alone fits the select at 1280x720 ('h200 - NVIDIA H200 SX' was cut off); the full name
    # and memory of the GPU chosen are in the caption under it
    st.selectbox("GPU", names, key=key, help="the GPU catalog (estimator/hardware.py)")
    chosen = st.session_state.get(key)
    if chosen in CATALOG:
        st.caption(f"{CATALOG[chosen].label}, {CATALOG[chosen].memory_bytes / 2**30:,.1f} GiB")


def call_form(prefix: str = "call_") -> bool:
    """The one-attention-call form; returns whether it was submitted on this run."""
    with st.form("call_form"):
        c1, c2, c3 = st.columns(3)
        with c1:
            _int("batch", f"{prefix}batch")
            _int("q_heads", f"{prefix}q_heads")
            _int("kv_heads", f"{prefix}kv_heads", help="q_heads must be a multiple of kv_heads (GQA when smaller)")
            _int("head_dim", f"{prefix}head_dim")
        with c2:
            _int("q_len (tokens)", f"{prefix}q_len")
            _int("kv_len (tokens)", f"{prefix}kv_len")
            st.selectbox("dtype", list(DTYPE_BITS), key=f"{prefix}dtype")
            st.selectbox("mode", CALL_MODES, key=f"{prefix}mode",
                         help="forward = inference under no_grad; forward_backward = the call, then backward")
        with c3:
            st.selectbox("backend", BACKENDS, key=f"{prefix}backend",
                         help="auto = what PyTorch picks; eager = the hand-written reference computation")
            st.checkbox("causal", key=f"{prefix}causal")
            st.selectbox("mask", CALL_MASKS, key=f"{prefix}mask",
                         help="bool / float: a dense (batch, 1, q_len, kv_len) mask tensor; window: a sliding window "
                              "of W keys (window:W); document: K packed documents of equal length (document:K)")
            st.number_input("mask size: window W or documents K", min_value=0, step=1, key=f"{prefix}mask_size",
                            help="for a window or document mask only")
            st.number_input("dropout", min_value=0.0, max_value=0.99, step=0.05, key=f"{prefix}dropout")
            gpu_select(f"{prefix}gpu")
        return st.form_submit_button("Estimate", type="primary")


def preset_select(prefix: str, presets: list[str]) -> None:
    """The preset, outside the form: choosing one sets n to its trained context (or native tokens) at once."""
    from ui.state import default_seq_len

    def on_change() -> None:
        n = default_seq_len(st.session_state[f"{prefix}preset"])
        if n:
            st.session_state[f"{prefix}seq_len"] = n

    st.selectbox("preset", presets, key=f"{prefix}preset", on_change=on_change,
                 help="choosing a preset sets n to the context it was trained for (encoders: their native tokens)")


def plan_form(prefix: str, presets: list[str], source: str) -> tuple[bool, object]:
    """The planning form for one model source; returns (submitted, uploaded config file or None).
    Four short columns (model, workload, memory, hardware) keep the results above the fold."""
    uploaded = None
    with st.form("plan_form"):
        if source == "custom":
            st.markdown("**Model: custom architecture**")
            a = st.columns(5)
            with a[0]:
                _int("layers", f"{prefix}layers")
                _int("hidden", f"{prefix}hidden")
            with a[1]:
                _int("heads (query)", f"{prefix}heads")
                _int("kv_heads", f"{prefix}kv_heads")
            with a[2]:
                _int("head_dim", f"{prefix}head_dim")
                _int("ffn (intermediate size)", f"{prefix}ffn")
            with a[3]:
                _int("vocab", f"{prefix}vocab")
            with a[4]:
                st.checkbox("gated FFN (SwiGLU/GeGLU: 3 matrices)", key=f"{prefix}gated_ffn")
                st.checkbox("tied embeddings", key=f"{prefix}tied_embeddings")
        c1, c2, c3, c4 = st.columns(4)
        with c1:
            st.markdown("**Model**")
            if source == "preset":
                st.caption(f"Preset: {st.session_state.get(f'{prefix}preset', '')} (chosen above)")
            elif source == "hf-config":
                uploaded = st.file_uploader("Hugging Face config.json", type=["json"], key=f"{prefix}config_file")
            else:
                st.caption("The architecture fields above.")
            st.selectbox("mode", PLAN_MODES, key=f"{prefix}mode",
                         help="training = one optimizer step; inference = prefill of n tokens + KV cache")
            st.selectbox("training precision", PRECISION_CHOICES, key=f"{prefix}precision",
                         format_func=lambda p: "follow dtype" if p == "auto" else p,
                         help="follow dtype: bfloat16 -> bf16-mixed, float16 -> 16-mixed, float32 -> 32-true")
            st.selectbox("optimizer (training)", list(OPTIMIZERS), key=f"{prefix}optimizer")
            st.selectbox("fine-tuning (training)", FINETUNES, key=f"{prefix}finetune",
                         help="full: every parameter trains; lora: peft adapters on a frozen base; qlora: adapters "
                              "over a bitsandbytes NF4 base (bf16-true)")
            st.selectbox("LoRA targets", LORA_TARGETS, key=f"{prefix}lora_targets")
            _int("LoRA rank r", f"{prefix}lora_rank")
        with c2:
            st.markdown("**Workload**")
            _int("sequence length n (tokens)", f"{prefix}seq_len")
            _int("batch", f"{prefix}batch")
            st.selectbox("attention backend", BACKENDS, key=f"{prefix}backend",
                         help="auto = what PyTorch picks; a forced backend; eager = hand-written attention")
        with c3:
            st.markdown("**Memory**")
            st.selectbox("dtype", list(DTYPE_BITS), key=f"{prefix}dtype")
            st.selectbox("KV-cache dtype", list(KV_DTYPE_BITS), key=f"{prefix}kv_dtype")
            st.selectbox("activation checkpointing", CHECKPOINTING, key=f"{prefix}checkpointing")
            st.number_input("attention window (tokens, 0 = the model's own)", min_value=0, step=256,
                            key=f"{prefix}window")
        with c4:
            st.markdown("**Hardware**")
            gpu_select(f"{prefix}gpu")
            _int("GPUs", f"{prefix}gpus")
            t1, t2 = st.columns(2)
            with t1:
                _int("tp", f"{prefix}tp", help="tensor parallel: heads, FFN and vocabulary split tp ways")
            with t2:
                _int("cp", f"{prefix}cp", help="context parallel: the sequence split cp ways (ring attention)")
        with st.expander("More: ZeRO, micro-batches, sequence parallelism, logits"):
            m1, m2, m3, m4 = st.columns(4)
            m1.selectbox("ZeRO stage (training)", ZERO_STAGES, key=f"{prefix}zero",
                         help="1 shards the optimizer state over data-parallel replicas, 2 also the gradients, "
                              "3 also the weights")
            m2.number_input("micro-batch (training, 0 = the whole per-replica batch)", min_value=0, step=1,
                            key=f"{prefix}micro_batch")
            m3.checkbox("sequence parallelism (training with tp > 1)", key=f"{prefix}sequence_parallel")
            m4.selectbox("logits (inference)", LOGITS, key=f"{prefix}logits",
                         help="last = logits for the last position only; all = for every position")
        with st.expander("Images: vision encoders (ViT, Swin) and vision-language models"):
            i1, i2, i3 = st.columns(3)
            i1.text_input("image size (pixels: S or HxW; empty = none)", key=f"{prefix}image_size",
                          help="a ViT or Swin takes its tokens from the image; a vision-language model adds each "
                               "image's tokens to n, which then counts the text tokens")
            i2.number_input("images per sequence", min_value=0, step=1, key=f"{prefix}images")
            i3.selectbox("trained parts (vision-language training)", ("all", "tower-frozen", "projector"),
                         key=f"{prefix}trainable",
                         help="all; tower-frozen: projector + language model; projector: the projector only")
        submitted = st.form_submit_button("Plan", type="primary")
    return submitted, uploaded
