"""GPU collectors: the in-process CUPTI tracer, its wire to the recorder, NVML and PM sampling.

The tracer side (``tracer``, ``stacks``, ``wire``, ``inject``) runs inside the profiled
process and imports only the standard library and cupti; the recorder side (``receiver``:
``transport``, ``inbox``, ``join``; ``nvml``) turns what arrives into ``kubeprof.model`` records.
"""
