"""The long-context decision tree the advisor walks (estimator/advice/tree.py), drawn as a graph with the current
plan's path highlighted."""

import streamlit as st

from estimator.advice.tree import render_tree
from ui import cached, state
from ui.text import md, one_line
from ui.tree_graph import tree_dot

st.title("Decision tree")
st.caption("Profile first, then choose the kernel, the architecture or the parallelism; never skip a step. Each box "
           "is the branch taken and, after →, the advice ids the advisor reports there. The highlighted path is "
           "the current plan's (the planning page's inputs).")
try:
    inputs = state.current_plan_inputs(st.session_state)
    ids = {a.id for a in cached.advice(inputs)}
    st.markdown(md(f"Plan: {inputs.model.name}, n = {inputs.seq_len:,}, batch {inputs.batch}, {inputs.mode}, "
                   f"{inputs.gpu}. Advice: {', '.join(sorted(ids)) or 'none'}."))
except Exception as exc:  # noqa: BLE001 - the tree is still worth showing without a path
    ids = set()
    st.warning(md(f"No path highlighted: {one_line(exc)}"))
st.graphviz_chart(tree_dot(ids), width="stretch")
with st.expander("The tree as text"):
    st.code(render_tree(), language=None)
