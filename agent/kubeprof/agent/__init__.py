"""kubeprof agent: collectors (CPU sampler, GPU tracer, NVML), the driver that polls them
into a sink (the local store or the node agent's spool), `kubeprof record` and the node agent."""
