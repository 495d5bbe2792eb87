"""The light, always-on node agent: NVML per-process GPU figures per pod, no BPF, no tracer."""
