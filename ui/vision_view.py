"""The planning page for images: a Swin or vision-language preset, an uploaded VLM/Swin config.json, or a ViT with
an image size. Tokens per modality first, then the verdict, where the memory goes part by part (vision tower,
projector, language model; Swin by stage), the time split and the advice. Text the user supplied (the config's
name) is escaped (`md`)."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from estimator.model.vision import is_vision_language, swin_from_hf, vlm_from_hf
from estimator.model.vision_presets import get_vision_preset
from estimator.model.vision_tokens import image_tokens, parse_image_size
from estimator.units import gib
from ui.text import md


def image_model(values, uploaded):
    """The Swin / VLM the form names (preset or uploaded config), or None."""
    if values.get("source") == "preset":
        return get_vision_preset(values.get("preset", ""))
    if values.get("source") == "hf-config" and uploaded is not None:
        from ui import uploads

        cfg = uploads.config_dict_or_none(uploaded)
        if cfg is None:
            return None
        name = uploads.config_name(getattr(uploaded, "name", "config"))
        if str(cfg.get("model_type") or "").lower() == "swin":
            return swin_from_hf(cfg, name)
        if is_vision_language(cfg):
            return vlm_from_hf(cfg, name)
    return None


def request_from_values(model, values):
    from estimator.model.vision_plan import VisionRequest
    from ui.state import plan_inputs

    size = parse_image_size(values["image_size"]) if values.get("image_size") else None
    vlm = hasattr(model, "lm")
    base_model = model.lm if vlm else model.stage_spec(0)
    base = plan_inputs({**values, "source": "hf-config", "window": 0}, base_model)
    base = replace(base, seq_len=1)
    return VisionRequest(model=model, base=base, image_size=size, images=int(values.get("images", 1)),
                         text_tokens=int(values["seq_len"]) if vlm else 0,
                         trainable=values.get("trainable", "all") if vlm else "all")


def vit_tokens(values, spec) -> int | None:
    """A ViT's tokens from the form's image size, (H//p)(W//p) + 1; None without one."""
    if not values.get("image_size") or spec.kind != "encoder" or not spec.patch_size > 1:
        return None
    return image_tokens("vit", *parse_image_size(values["image_size"]), patch=spec.patch_size).vision_tokens


def render(top, model, values) -> None:
    from estimator.advice.vision_rules import vision_advice
    from estimator.model.vision_plan import vision_plan
    from estimator.model.vision_report import token_lines

    plan = vision_plan(request_from_values(model, values))
    t = plan.tokens
    with top:
        cols = st.columns(3)
        cols[0].metric("vision tokens per image", f"{t['vision_encoder']:,}")
        cols[1].metric("language-model tokens", f"{t['language_model']:,}" if t["language_model"] else "—")
        cols[2].metric("images x text", f"{t['images']} x {t['text']:,}" if t["language_model"] else f"{t['images']}")
        for line in token_lines(t):
            st.caption(md(line.strip()))
        say = st.success if plan.fits else st.error
        say(md(f"{model.name}: {plan.verdict}"))
    st.subheader("Where the memory goes")
    st.table([{"component": c, "GiB": f"{b / 2**30:.2f}", "bytes": f"{b:,}"} for c, b in plan.components])
    st.caption(md("By part: " + ", ".join(f"{k} {gib(v, mib_below_1gib=False)}"
                                            for k, v in plan.memory_split_bytes.items())
                  + f". Peak in the {plan.phase} phase."))
    st.subheader("Time (estimates)")
    st.caption(md(", ".join(f"{k} {v:,.2f} ms" for k, v in plan.time_split_ms.items())))
    st.subheader("Advice")
    for item in vision_advice(replace(plan)):
        with st.expander(f"**{md(item.title)}** · `{item.id}`"):
            st.markdown(f"**Why.** {md(item.why)}")
            st.markdown(f"**Expected effect.** {md(item.expected_effect)}")
