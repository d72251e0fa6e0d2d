"""`tensorant demo`: the guide walked end to end through the HTTP API (`run_demo`)."""
