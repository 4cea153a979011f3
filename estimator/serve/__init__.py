"""Serving capacity (docs/contract.md §6, docs/serving.md): a request workload on an engine's paged KV pool.

Modules, one concept each (imports run downward in this order):
- workload.py: `Request`, `Workload`, the CSV reader, the synthetic generator (Poisson, length distributions).
- engines.py: `ENGINES` (defaults per engine, with their sources), `EngineConfig` (the user's knobs),
  `resolve_config`.
- memory.py: `engine_memory` -> `EngineMemory`, each engine's own pool rule (blocks, max batched tokens, the
  activation, mask and static terms).
- step_cost.py: `StepPricer`, one engine step's time from the project's time model.
- simulate.py: `simulate`, the engine's step loop -> `Simulation` (per-request times, timeline).
- result.py: `ServeResult.to_dict()` with the §6 keys, `percentiles`, `Targets`.
- capacity.py: `ServeInputs`, `serve()`, `prepare()`.
- sizing.py: `max_rate`, `rate_sweep`, `size_fleet`.
"""
