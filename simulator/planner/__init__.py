"""Search, analysis and reports: which device and configuration meets an SLO cheapest."""
