"""The views: one projection per read model, each applying events to its documents."""
