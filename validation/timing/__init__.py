"""Kernel time calibration: `python -m validation calibrate` (its sections and GEMMs) and the fit of the time
model's factors from measured rows (fit_time)."""
