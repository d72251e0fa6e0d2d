"""The composition root and every process's entry point: settings, bootstrap, the CLI, the
API and worker processes, the tickers and the demo. Nothing below imports this package."""
