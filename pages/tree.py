"""The long-context decision tree the advisor walks (estimator/decision_tree.py), as text."""

import streamlit as st

from estimator.advice.tree import render_tree

st.title("Decision tree")
st.caption("Profile first, then choose the kernel, the architecture or the parallelism; never skip a step "
           "(never skip a step). Advice ids in brackets are what the advisor reports at each step, in this order.")
st.code(render_tree(), language=None)
