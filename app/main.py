"""The what-if dashboard: `streamlit run app/main.py` (or `make app`).

Pages live in ``app_pages/``; what they share (inline errors, stoppable cached runs, figures)
in ``dashboard/``. Every number comes from the ``simulator`` core: the pages hold no model.
"""

from __future__ import annotations

import streamlit as st

st.set_page_config(
    page_title="Capacity planner", page_icon=":material/dns:", layout="wide",
    initial_sidebar_state="expanded",
)  # fmt: skip

PAGES = {
    "Plan": [
        st.Page("app_pages/what_if.py", title="What-if", icon=":material/tune:",
                url_path="what-if", default=True),
        st.Page("app_pages/memory.py", title="Memory", icon=":material/memory:",
                url_path="memory"),
        st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:",
                url_path="compare"),
    ],
    "Results": [
        st.Page("app_pages/search_results.py", title="Search results",
                icon=":material/query_stats:", url_path="search-results"),
    ],
    "Calibration": [
        st.Page("app_pages/calibration.py", title="Calibration", icon=":material/speed:",
                url_path="calibration"),
    ],
}  # fmt: skip

st.navigation(PAGES).run()
