"""The measured runs of one whole-model case of `validation.model.hf_models`: a training step (`run_train`, with its
optimizer `make_optimizer`) and a prefill with its decode steps (`run_prefill`), on the device counters `Dev`.
Self-contained like hf_models: torch (bitsandbytes for adamw-8bit), no estimator/ imports.

Training protocol (mode=train). ids = randint(vocab, (batch, seq_len)), labels = ids. model.train(),
model.config.use_cache = False, checkpointing `hf` = model.gradient_checkpointing_enable() (HF's default kwargs;
transformers 5.17 passes use_reentrant=False). The optimizer is created after the model. The forward keeps only
`loss` (the output object, with its logits, is dropped before backward, as in a Lightning training_step).
  step 1: reset peak; forward(labels=ids); backward; optimizer phase; -> peak_step1_bytes, time_step1_ms. It
          creates the optimizer state. Then synchronize; state_bytes = memory_allocated() - baseline - weights
          (optimizer state, fp32 masters, GradScaler state: everything persistent).
  step 2: the peak stats are reset at each phase boundary:
          forward  -> peak_forward_bytes, after_forward_bytes (memory_allocated() right after it: weights + state
                      + saved activations + loss), time_forward_ms
          backward -> peak_backward_bytes, time_backward_ms
          optimizer (incl. zero_grad(set_to_none=True)) -> peak_optimizer_bytes, time_optimizer_ms
  peak_bytes = max(step 1, the three phases of step 2). time_step_ms = median over steps 2, 3, 4 (only step 2 when
  step 1 took > 5 s; for flex_attention, whose step 1 includes compiling, when step 2 took > 5 s); CUDA events
  on GPU, perf_counter on CPU.
Precisions (Lightning names):
  bf16-mixed  fp32 weights; forward+loss under torch.autocast(device, bfloat16); backward outside autocast;
              optimizer on the fp32 params.
  16-mixed    fp32 weights; autocast float16; torch.amp.GradScaler: scale(loss).backward(), scaler.step(opt),
              scaler.update(). (On CPU torch 2.13 has fp16 autocast and a CPU GradScaler, so it runs there too.)
  bf16-true / 16-true  model built in bf16 / fp16; optimizer on those params (its state in that dtype).
  fp8         bf16 model, torchao float8 training on the decoder layers' linears (validation.model.hf_finetune).
Fine-tuning (`finetune` lora / qlora, validation.model.hf_finetune): the optimizer gets the trainable parameters
(the adapters) only.
  32-true     fp32 everything, no autocast.
  bf16-master bf16 model; an fp32 master copy of each parameter (p.detach().float()), optimizer over the masters.
              After backward, for each parameter in order: master.grad = p.grad.float(); p.grad = None. Then
              optimizer.step(); then p.data.copy_(master) for each parameter; master.grad = None. (Our stand-in
              for the DeepSpeed / Megatron mixed-precision recipe: bf16 weights+grads, fp32 master + moments.)
Optimizers: adamw (torch.optim.AdamW, default foreach, lr 1e-5), adamw-fused (fused=True; CUDA only, else status
`unsupported`), sgd (lr 1e-3, momentum 0.9), adamw-8bit (bitsandbytes AdamW8bit; `unsupported` if not importable).

Prefill protocol (mode=prefill; bf16 model, precision column `bf16-true`): model.eval(), under torch.no_grad():
  reset peak; out = model(ids, use_cache=True, logits_to_keep=1); with `out` alive: peak_bytes,
  kv_cache_bytes = memory_allocated() - baseline - weights - logits_bytes - input_bytes (ids, int64).
  Then decode_tokens single-token steps (past_key_values=out.past_key_values) -> decode_ms_per_token (median),
  peak_decode_bytes; then `out` is freed and time_prefill_ms = median of 3 more prefills (or the measured one if
  it took > 5 s). time_first_call_ms is the first call of the case (compile included for flex_attention).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time

import torch

PRECISIONS = ("bf16-mixed", "16-mixed", "bf16-true", "16-true", "32-true", "bf16-master", "fp8")
OPTIMIZERS = ("adamw", "adamw-fused", "sgd", "adamw-8bit")
SLOW_S = 5.0  # a first call longer than this is timed once only


class Unsupported(Exception):
    """The case cannot run here (status `unsupported`)."""


# ----------------------------------------------------------------------------------------------------- device


class Dev:
    """Device-agnostic counters: CUDA allocator stats and events on GPU, None / perf_counter on CPU."""

    def __init__(self, device: str):
        self.device = torch.device(device)
        self.type = self.device.type
        self.cuda = self.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self):
        return torch.cuda.memory_allocated(self.device) if self.cuda else None

    def peak(self):
        return torch.cuda.max_memory_allocated(self.device) if self.cuda else None

    def peak_reserved(self):
        return torch.cuda.max_memory_reserved(self.device) if self.cuda else None

    def empty_cache(self):
        if self.cuda:  # on CPU there are no counters to keep clean (and gc.collect costs ~0.1 s a call)
            gc.collect()
            torch.cuda.empty_cache()

    def name(self):
        return torch.cuda.get_device_name(self.device) if self.cuda else "cpu"

    def timed(self, fn):
        """(fn(), milliseconds), the device work included."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return out, start.elapsed_time(end)
        t = time.perf_counter()
        out = fn()
        return out, (time.perf_counter() - t) * 1e3


def max_or_none(*xs):
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


def sub_or_none(a, *bs):
    if a is None or any(b is None for b in bs):
        return None
    return a - sum(bs)



# ------------------------------------------------------------------------------------------------- measuring


def make_optimizer(name, params, dev):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5)
    if name == "adamw-fused":
        if not dev.cuda:
            raise Unsupported("adamw-fused is measured on CUDA only")
        return torch.optim.AdamW(params, lr=1e-5, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adamw-8bit":
        try:
            import bitsandbytes as bnb
        except Exception:  # noqa: BLE001 - any import failure means "not usable here"
            raise Unsupported("bitsandbytes not installed") from None
        return bnb.optim.AdamW8bit(params, lr=1e-5)
    raise ValueError(f"unknown optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")


class PhaseBox:
    phase = "setup"


def model_kwargs(model, info, case, dev, train: bool) -> dict:
    """The forward's arguments: random token ids (labels = ids for training; KV cache and the last position's
    logits for a prefill), or a vision family's pixels and ids (validation.model.hf_vision.make_inputs)."""
    if "vision_cfg" in info:
        from validation.model.hf_vision import make_inputs

        return make_inputs(model, info["vision_cfg"], case, dev, train)
    ids = torch.randint(0, info["vocab"], (case["batch"], case["seq_len"]), device=dev.device)
    return {"input_ids": ids, "labels": ids} if train else {"input_ids": ids, "use_cache": True, "logits_to_keep": 1}


def _set_train_mode(model, case) -> None:
    """Check the case's training fields and put the model in training mode with its checkpointing."""
    if case["precision"] not in PRECISIONS:
        raise ValueError(f"unknown precision {case['precision']!r}")
    if case["decode_tokens"]:
        raise ValueError("decode_tokens applies to prefill only")
    model.train()
    model.config.use_cache = False
    if case["checkpointing"] == "hf":
        # transformers 5.17: gradient_checkpointing_kwargs=None -> {"use_reentrant": False}; HF default kept.
        model.gradient_checkpointing_enable()
    elif case["checkpointing"] == "none":
        if model.is_gradient_checkpointing:
            model.gradient_checkpointing_disable()
    else:
        raise ValueError(f"unknown checkpointing {case['checkpointing']!r}")


class TrainStep:
    """One optimizer step of the case's precision and optimizer (the module docstring's recipe), as its three
    phases: `forward` (the loss only), `backward`, `optimizer_phase` (with zero_grad); `full_step` runs all three.
    Built in the `optimizer_init` phase: the optimizer and any fp32 masters exist from here on."""

    def __init__(self, model, info, case, dev):
        prec = case["precision"]
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = [p.detach().float() for p in self.params] if prec == "bf16-master" else None
        self.opt = make_optimizer(case["optimizer"], self.masters if self.masters is not None else self.params, dev)
        self.scaler = torch.amp.GradScaler(dev.type) if prec == "16-mixed" else None
        self.amp = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(prec)
        self.dev_type = dev.type
        self.kw = model_kwargs(model, info, case, dev, train=True)

    def forward(self):
        ctx = torch.autocast(self.dev_type, dtype=self.amp) if self.amp is not None else contextlib.nullcontext()
        with ctx:
            out = self.model(**self.kw)
            loss = out.loss
        del out  # logits dropped before backward (Lightning's training_step returns the loss only)
        return loss

    def backward(self, loss):
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def optimizer_phase(self):
        params, masters = self.params, self.masters
        if masters is not None:
            for p, m in zip(params, masters, strict=True):
                m.grad = None if p.grad is None else p.grad.float()
                p.grad = None
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        if masters is not None:
            with torch.no_grad():
                for p, m in zip(params, masters, strict=True):
                    p.data.copy_(m)
                    m.grad = None
        self.opt.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)

    def full_step(self):
        loss = self.forward()
        self.backward(loss)
        del loss
        self.optimizer_phase()


def _measure_phases(step: TrainStep, dev, row, box) -> list[float]:
    """Step 2, phase by phase (peak stats reset at each boundary): fills the per-phase peaks and times, the loss,
    peak_bytes and peak_reserved_bytes; returns the three phase times (ms)."""
    box.phase = "forward"
    dev.reset_peak()
    loss, t_f = dev.timed(step.forward)
    row["after_forward_bytes"] = dev.allocated()
    row["peak_forward_bytes"] = dev.peak()
    reserved = [dev.peak_reserved()]
    box.phase = "backward"
    dev.reset_peak()
    loss_value = loss.detach()
    _, t_b = dev.timed(functools.partial(step.backward, loss))
    loss = None
    row["peak_backward_bytes"] = dev.peak()
    reserved.append(dev.peak_reserved())
    box.phase = "optimizer"
    dev.reset_peak()
    _, t_o = dev.timed(step.optimizer_phase)
    row["peak_optimizer_bytes"] = dev.peak()
    reserved.append(dev.peak_reserved())
    row["loss"] = round(float(loss_value.float().item()), 5)
    del loss_value
    row.update(time_forward_ms=round(t_f, 3), time_backward_ms=round(t_b, 3), time_optimizer_ms=round(t_o, 3))
    row["peak_bytes"] = max_or_none(row["peak_step1_bytes"], row["peak_forward_bytes"], row["peak_backward_bytes"],
                                    row["peak_optimizer_bytes"])
    row["peak_reserved_bytes"] = max_or_none(*reserved)
    return [t_f, t_b, t_o]


def run_train(model, info, case, dev, row, box):
    """The training protocol of the module docstring: step 1 (creates the optimizer state), step 2 phase by phase,
    then steps 3 and 4 for the median step time unless step 1 (or, for flex_attention, step 2) was slow."""
    _set_train_mode(model, case)
    base, weights = info["baseline_bytes"], info["weights_bytes"]
    box.phase = "optimizer_init"
    step = TrainStep(model, info, case, dev)
    flex = case["attn_implementation"] == "flex_attention"
    # step 1: creates the optimizer state
    box.phase = "step1"
    dev.reset_peak()
    _, ms1 = dev.timed(step.full_step)
    row["peak_step1_bytes"] = dev.peak()
    row["time_step1_ms"] = round(ms1, 3)
    row["time_first_call_ms"] = round(ms1, 3)
    dev.sync()
    row["state_bytes"] = sub_or_none(dev.allocated(), base, weights)
    times = [sum(_measure_phases(step, dev, row, box))]
    if ms1 <= SLOW_S * 1e3 or flex and times[0] <= SLOW_S * 1e3:
        box.phase = "timing"
        for _ in range(2):
            _, ms = dev.timed(step.full_step)
            times.append(ms)
    row["time_step_ms"] = round(statistics.median(times), 3)
    row["n_timed"] = len(times)
    box.phase = "cleanup"  # the step (optimizer, masters, scaler, ids) dies with this frame
    if model.is_gradient_checkpointing:
        model.gradient_checkpointing_disable()


def _decode_ms(model, out, info, case, dev) -> float:
    """Median ms of `decode_tokens` single-token steps on the prefill output's KV cache (the cache grows a step)."""
    tok = torch.randint(0, info["vocab"], (case["batch"], 1), device=dev.device)
    step_ms = []
    from validation.model.hf_hybrid import cache_kwargs, cache_of

    for _ in range(case["decode_tokens"]):
        cache = cache_of(out)  # past_key_values, or Mamba2's cache_params
        del out
        out, t = dev.timed(lambda c=cache: model(input_ids=tok, use_cache=True, **cache_kwargs(model, c)))
        del cache
        step_ms.append(t)
    return round(statistics.median(step_ms), 4)


def _cache_tensor_bytes(out) -> int:
    """numel · element_size of every tensor the returned cache holds (k, v; conv and recurrent states)."""
    from validation.model.hf_hybrid import cache_of

    cache, total = cache_of(out), 0
    for layer in getattr(cache, "layers", ()) or ():
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            value = getattr(layer, name, None)
            for t in (value.values() if isinstance(value, dict) else (value,)):
                if isinstance(t, torch.Tensor):
                    total += t.numel() * t.element_size()
    return total


def run_prefill(model, info, case, dev, row, box):
    model.eval()
    if model.is_gradient_checkpointing:
        model.gradient_checkpointing_disable()
    base, weights = info["baseline_bytes"], info["weights_bytes"]
    kw = model_kwargs(model, info, case, dev, train=False)
    row["input_bytes"] = sum(v.numel() * v.element_size() for v in kw.values() if isinstance(v, torch.Tensor))
    with torch.no_grad():
        box.phase = "prefill"
        dev.reset_peak()
        out, ms = dev.timed(lambda: model(**kw))
        row["peak_bytes"] = dev.peak()
        row["peak_reserved_bytes"] = dev.peak_reserved()
        row["time_first_call_ms"] = round(ms, 3)
        row["logits_bytes"] = out.logits.numel() * out.logits.element_size()
        row["kv_cache_bytes"] = sub_or_none(dev.allocated(), base, weights, row["logits_bytes"], row["input_bytes"])
        row["cache_tensor_bytes"] = _cache_tensor_bytes(out)
        if case["decode_tokens"] > 0:
            box.phase = "decode"
            dev.reset_peak()
            row["decode_ms_per_token"] = _decode_ms(model, out, info, case, dev)
            row["peak_decode_bytes"] = dev.peak()
        del out
        if case["decode_tokens"] > 0:  # the same lengths again: every per-length library cache is warm now
            box.phase = "decode_warm"
            out = model(**kw)
            row["decode_warm_ms_per_token"] = _decode_ms(model, out, info, case, dev)
            del out
        box.phase = "timing"
        times = [ms]
        if ms <= SLOW_S * 1e3:
            times = []
            for _ in range(3):
                out, t = dev.timed(lambda: model(**kw))
                del out
                times.append(t)
        row["time_prefill_ms"] = round(statistics.median(times), 3)
        row["n_timed"] = len(times)
