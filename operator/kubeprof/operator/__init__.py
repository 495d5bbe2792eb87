"""kubeprof operator: reconciles ProfilingSession resources (kopf)."""
