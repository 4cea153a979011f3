"""Single-call measurement (docs/contract.md §1, §5): the protocol, the runner and its sweeps, case lists and grids,
the eager and flex references, kernel counts, allocator traces and the report; mirrors estimator/call/."""
