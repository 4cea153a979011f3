"""A whole model: architecture specs and presets (`specs`), a Hugging Face config.json read into one
(`hf_config`), what a plan is asked (`inputs`), activation bytes (`activations`), the per-GPU budget (`budget`),
FLOPs and time (`time`), solvers (`solve`), the plan with its limits (`plan`), production traces (`trace`).
Built on `estimator.call`."""
