"""`python -m estimator {predict,plan,advise}`: argument parsing and output only."""
