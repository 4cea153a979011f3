"""`python -m validation serve`: Hugging Face transformers' continuous batching (`init_continuous_batching`,
`add_request` at each request's arrival time) run on the local device for a model built from a config in code
(random weights), recorded request by request beside the serving simulation's prediction.

engine.py   builds the model and runs the engine (torch, transformers)
records.py  per-request rows, percentiles and the summary (stdlib only)
cli.py      the subcommand's flags, the case file, and the files it writes
"""
