"""GPU collectors: the in-process CUPTI tracer, its wire to the recorder, NVML and PM sampling.

The tracer side (``tracer`` with ``subscription``, ``launch_stacks``, ``activity`` and
``cupti_errors``; ``stacks``, ``wire``, ``inject``) runs inside the profiled process and
imports only the standard library and cupti; the recorder side (``receiver`` with
``transport``, ``inbox``, ``join`` and ``stack_join``; ``nvml``) turns what arrives into
``kubeprof.model`` records.
"""
