"""CPU collector: an eBPF perf-event sampler (bcc) joined with py-spy's Python stacks.

Modules, one concept each: `bpf_program` (the BPF C text and loader), `sampler` (raw
records out of the ring buffer), `elf` and `symbolize` (addresses to names while the
process lives), `python_stacks` (py-spy as the Python unwinder), `merge` (pure joins of
native and Python stacks), `preflight` (one-line causes and fixes), `collector` (the
`CpuCollector` that `kubeprof record` and the agent drive).
"""
