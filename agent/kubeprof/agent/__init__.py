"""kubeprof agent: collectors (CPU sampler, GPU tracer, NVML) and reporters."""
