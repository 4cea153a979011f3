"""Whole-model runs: real Hugging Face models (configs, suites, the measured runs, profiles, several processes under
torchrun) and their report against the plan; mirrors estimator/model/."""
