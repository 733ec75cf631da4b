"""What the dashboard pages share: inline errors, stoppable runs with progress, cached calls
into the core, and figures. No modelling here: every number comes from ``simulator``."""
