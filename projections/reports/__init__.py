"""Reports computed from the views at read time: hourly charges, FOCUS files, cost summaries,
the reconciliation with RunPod's bill and the cleanup status."""
