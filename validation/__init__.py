"""Measure real attention calls (contract §1) and compare them with the estimator.

Imports only torch, pandas and `estimator` (the GPU machine has nothing else); never streamlit or plotly.
Entry point: `python -m validation run | grid | report` (validation/cli.py); docs/validation.md.
"""
