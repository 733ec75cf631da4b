"""The what-if dashboard: `streamlit run app/main.py` (or `make app`).

Pages live in ``app_pages/``; what they share (inline errors, stoppable cached runs, figures)
in ``dashboard/``. Every number comes from the ``simulator`` core: the pages hold no model.
"""

from __future__ import annotations


def main() -> None:
    import streamlit as st

    st.set_page_config(
        page_title="Capacity planner", page_icon=":material/dns:", layout="wide",
        initial_sidebar_state="expanded",
    )  # fmt: skip
    pages = {
        "Plan": [
            st.Page("app_pages/what_if.py", title="What-if", icon=":material/tune:",
                    url_path="what-if", default=True),
            st.Page("app_pages/memory.py", title="Memory", icon=":material/memory:",
                    url_path="memory"),
            st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:",
                    url_path="compare"),
            st.Page("app_pages/sizing.py", title="Sizing", icon=":material/groups:",
                    url_path="sizing"),
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
    st.navigation(pages).run()


# Streamlit runs this file as ``__main__``. The Compare and Sizing pages' worker pools start
# their processes with multiprocessing's "spawn" (the server is threaded), and a spawned
# process first re-runs the parent's ``__main__.__file__``, which Streamlit points at this
# file, under the name ``__mp_main__``: there, with no script run context, every st call
# logged "missing ScriptRunContext" (a dozen lines per worker). So nothing runs on import.
if __name__ == "__main__":
    main()
