"""The discrete-event simulator, workloads, baselines and traces for Tangram policies."""
