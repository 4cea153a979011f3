"""Measure real attention calls (contract §1) and compare them with the estimator.

Imports only torch, pandas and `estimator` (the GPU machine has nothing else); never streamlit or plotly.
Entry point: `python -m validation run | grid | report` (validation/cli.py); docs/validation.md.
Rooms, mirroring estimator/: `call/` (one attention call measured by the protocol, its sweeps, case lists and
report), `model/` (real Hugging Face models, also over several processes, and their report against the plan),
`timing/` (kernel time calibration and the time model's fit); `errors.py` (OOM detection, one-line reasons).
"""
