"""hf-cb's step time around the GPU work: what transformers 5.17 continuous batching does on the host each step.

The engine runs one step at a time from Python, in sync mode (continuous_batching/continuous_api.py
`_generation_loop_body`): `prepare_next_batch`, then `_generation_step` (the forward, then
`retrieve_device_outputs`: a blocking stream synchronize), then `update_batch`. Each phase's mechanism, from the
source (paths under transformers/generation/continuous_batching/):

- prepare (`prepare_next_batch`: scheduler.py `schedule_batch`, then input_outputs.py `prepare_batch_tensors`):
  per scheduled request a Python loop body; per request and per layer type `utils.py build_attention_mask` (a
  handful of small torch ops building the request's block of the dense mask: full attention, and for a sliding
  type one more `tril` and add); the read and write index lists of every layer group, built in Python
  (cache_manager.py: a full-attention group extends one `range` per block, a sliding group loops once per token
  over min(past, window - 1) cached tokens) and copied to the device with `torch.tensor(list)` (per element);
  the write indices, input ids and positions per new token and group. Read indices exist only when some request
  in the batch has cached tokens (input_outputs.py: `read_index = None` when max_kv_read is 0).
- forward: every kernel is launched from eager Python while the GPU runs the ones already queued, so the
  forward takes max(GPU, kernels x LAUNCH); and where a layer type's packed attention call has a (Q, K) the process
  has not run, SDPA on cuDNN first builds that execution graph on the host (aten/src/ATen/native/cudnn/MHA.cpp,
  torch 2.11: a per-process graph cache keyed by shapes and strides; estimator/serve/step_cost.py
  `StepPricer.graph_keys`), GRAPH_BUILD each, with the GPU idle behind it. Q and K change nearly every step, so
  nearly every step builds one graph per layer type; steps that repeat an earlier shape (block-starved offline
  runs whose rounds of identical requests repeat the same batches) do not, which is why those runs ran at two
  speeds (25-35 ms and 63-100 ms for the same batch). Measured inside the engine (`python -m
  validation.serving.sdpa_probe`, validation/data/h200_serve_sdpa_probe_calls.csv and
  h200_serve_sdpa_probe_steps.csv: every SDPA call of llama-3.1-8b cut to 20 layers timed): the first call of a
  step took 37.5 ms median on the host, the other 19 together 1.1 ms; with cuDNN SDPA disabled the same engine's
  decode steps ran 16.3 ms, 17.9 us a launched kernel, with the priced GPU time (7.4 ms) hidden behind the launches.
- update (`update_batch`): per scheduled request a Python loop body.

Fitted (least squares in ms) by `python -m validation.serving.fit` (its docstring has the command) on H200 steps:
the phases of validation/data/h200_serve_fit2_steps.csv (validation/serving/engine.py `_instrument` times each
phase inside the engine) fix PREPARE_* and UPDATE_*; the forward of those steps and, for the steps of
validation/data/h200_serve_fit_steps.csv, h200_serve_heldout_steps.csv and h200_serve_heldout2_steps.csv, the step
minus the fitted prepare and update, fix LAUNCH and GRAPH_BUILD (28 runs, each weighing the same). LAUNCH comes out
19.2 us, as the probe's 17.9 us and the block-starved runs' repeated-shape steps (~21 us); GRAPH_BUILD comes out
76 ms, against 37.5 ms in the probe's engine and 40.9 ms for a bare call (estimator/model/step_time.py
CUDNN_GRAPH_BUILD_MS): the build is host CPU work whose time varied between the measuring sessions (the five
sessions' runs imply 40-95 ms a build), and the fit takes their average; that spread is the time band's main part.
Unit costs measured directly on the same machine (`python -m validation.serving.host_probe`,
validation/data/h200_serve_host_probe.csv) agree in size: a sliding read 103 ns a token, a full read 12 ns a
token, list-to-tensor 63 ns an element, a mask 29 us (full) and 45 us (sliding) a request.

API: `HostShape`, `host_shape(...)`, `prepare_ms(shape)`, `update_ms(shape)`, `forward_ms(gpu_ms, kernels,
new_graphs=0)`, `step_ms(shape, gpu_ms, kernels, new_graphs=0)`.
"""

from __future__ import annotations

from dataclasses import dataclass

HF_CB_PREPARE_BASE_MS = 0.3869
HF_CB_PREPARE_PER_REQUEST_MS = 0.000944
HF_CB_MASK_FULL_PER_REQUEST_MS = 0.05824
HF_CB_MASK_SLIDING_PER_REQUEST_MS = 0.08119
HF_CB_READ_FULL_PER_TOKEN_MS = 0.0001104
HF_CB_READ_SLIDING_PER_TOKEN_MS = 0.0002184
HF_CB_WRITE_PER_TOKEN_MS = 0.0004276
HF_CB_UPDATE_BASE_MS = 0.05984
HF_CB_UPDATE_PER_REQUEST_MS = 0.007225
HF_CB_LAUNCH_MS = 0.01916
HF_CB_GRAPH_BUILD_MS = 76.11


@dataclass(frozen=True, kw_only=True)
class HostShape:
    """What one hf-cb step hands the host: scheduled requests, new tokens, the read-index elements summed over the
    full-attention groups and over the sliding groups, the layer groups, and which layer types have a mask."""
    requests: int
    q_tokens: int
    read_full_tokens: int
    read_sliding_tokens: int
    groups: int
    full_mask: bool
    sliding_mask: bool

    def __post_init__(self) -> None:
        for name in ("requests", "q_tokens", "read_full_tokens", "read_sliding_tokens", "groups"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected a count >= 0, got {getattr(self, name)}")


def host_shape(*, requests: int, q_tokens: int, cached_tokens: int, window_cached_tokens: int, full_groups: int,
               sliding_groups: int, masked: bool) -> HostShape:
    """The HostShape of a step whose requests hold `cached_tokens` cached tokens in all (`window_cached_tokens`:
    the same capped at window - 1 a request), over `full_groups` and `sliding_groups` layer groups; `masked`: the
    attention runs through `paged|sdpa` or `paged|eager` (a dense mask per layer type)."""
    read = cached_tokens > 0  # no request has cached tokens: no read indices at all
    return HostShape(requests=requests, q_tokens=q_tokens,
                     read_full_tokens=full_groups * (cached_tokens + q_tokens) if read else 0,
                     read_sliding_tokens=sliding_groups * (window_cached_tokens + q_tokens) if read else 0,
                     groups=full_groups + sliding_groups, full_mask=masked and full_groups > 0,
                     sliding_mask=masked and sliding_groups > 0)


def prepare_ms(s: HostShape) -> float:
    return (HF_CB_PREPARE_BASE_MS + HF_CB_PREPARE_PER_REQUEST_MS * s.requests
            + HF_CB_MASK_FULL_PER_REQUEST_MS * s.requests * s.full_mask
            + HF_CB_MASK_SLIDING_PER_REQUEST_MS * s.requests * s.sliding_mask
            + HF_CB_READ_FULL_PER_TOKEN_MS * s.read_full_tokens
            + HF_CB_READ_SLIDING_PER_TOKEN_MS * s.read_sliding_tokens
            + HF_CB_WRITE_PER_TOKEN_MS * s.q_tokens * s.groups)


def update_ms(s: HostShape) -> float:
    return HF_CB_UPDATE_BASE_MS + HF_CB_UPDATE_PER_REQUEST_MS * s.requests


def forward_ms(gpu_ms: float, kernels: int, new_graphs: int = 0) -> float:
    """The forward's wall ms: the host launching `kernels` while the GPU runs them (whichever is longer), plus the
    cuDNN graphs built on the host before their layer's attention can launch."""
    return max(gpu_ms, HF_CB_LAUNCH_MS * kernels) + HF_CB_GRAPH_BUILD_MS * new_graphs


def step_ms(s: HostShape, gpu_ms: float, kernels: int, new_graphs: int = 0) -> float:
    """Wall ms of one hf-cb step: prepare + forward + update (the module docstring); `new_graphs`: cuDNN graphs
    the step's attention builds (estimator/serve/step_cost.py `StepPricer.graph_keys`)."""
    return prepare_ms(s) + forward_ms(gpu_ms, kernels, new_graphs) + update_ms(s)
