"""The capacity planner's web app: `streamlit run app.py`.

Thin pages over the estimator, the advisor and validation (no logic in the pages). Each page reads
its widgets, builds a config (a ValueError becomes st.error), calls the estimator and renders.
"""

import sys

import streamlit as st

# The server's sender thread waits for the interpreter lock once per message it sends while a page's script computes;
# at Python's default switch interval (5 ms, `sys.getswitchinterval()`) a re-run's first elements left the server
# ~5 ms apart. 0.5 ms lets them leave as they are made (docs/speed.md: the re-run in Chromium).
sys.setswitchinterval(0.0005)

st.set_page_config(page_title="Attention capacity planner", page_icon="🧮", layout="wide")

PAGES = [
    st.Page("pages/plan.py", title="Plan a model", icon=":material/calculate:", default=True),
    st.Page("pages/call.py", title="One attention call", icon=":material/function:"),
    st.Page("pages/trace.py", title="Production trace", icon=":material/timeline:"),
    st.Page("pages/serve.py", title="Serve a workload", icon=":material/dns:"),
    st.Page("pages/validate.py", title="Validate on a GPU", icon=":material/speed:"),
    st.Page("pages/tree.py", title="Decision tree", icon=":material/account_tree:"),
]
st.navigation(PAGES).run()
