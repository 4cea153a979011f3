"""Pure helpers behind the Streamlit pages: forms and URL state, sweeps, figures, exports, GPU validation."""
