# The kubeprof agent image (`kubeprof agent`), run by each session's DaemonSet and by the
# light agent's (`kubeprof agent --light`, which reads NVML through nvidia-ml-py; the NVML
# library itself, libnvidia-ml.so, comes from the node's driver), and the source of the GPU
# tracer the injection webhook's init container copies into pods. bcc comes
# from Debian (python3-bpfcc; the PyPI "bcc" is unrelated), so the agent's Python is
# Debian's python3 with system site-packages. Kernel headers are not in the image: the
# DaemonSet mounts the node's /lib/modules and /usr/src read-only. Build from the repo root:
#   docker build -f docker/agent.Dockerfile -t REGISTRY/kubeprof-agent:0.1.0 .
# Pin the base by digest for reproducible builds. Not built in this repository's CI: its
# machines have no container engine (the bundle's layout is tested over a fake tree in
# tests/unit/gpu/test_tracer_bundle.py).
#
# The tracer's C launch hook (agent/kubeprof/agent/gpu/_launchhook.c), built once per CPython
# minor the bundle supports, against the oldest glibc of the manylinux2014 toolchain so it
# loads in pods of any distribution from 2014 on (it needs only libc and libdl).
FROM quay.io/pypa/manylinux2014_x86_64 AS hooks
COPY scripts/build_launchhook.sh /b/scripts/
COPY agent/kubeprof/agent/gpu/_launchhook.c /b/agent/kubeprof/agent/gpu/
RUN for t in 310 311 312 313; do \
      /b/scripts/build_launchhook.sh /opt/python/cp$t-cp$t/bin/python /out || exit 1; \
      ls /out/_launchhook.cpython-$t-*.so || exit 1; \
    done

FROM docker.io/library/debian:12.11-slim
ARG CUPTI_PYTHON=13.4.0
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv python3-bpfcc ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY agent ./agent
COPY operator ./operator
RUN python3 -m venv --system-site-packages /opt/kubeprof \
 && /opt/kubeprof/bin/pip install --no-cache-dir . "nvidia-ml-py>=12" \
 && /opt/kubeprof/bin/python -c 'import bcc, pynvml, kubeprof.cli' \
 && rm -rf /src \
 && find /opt/kubeprof -name '__pycache__' -prune -exec rm -rf {} +
# The tracer bundle (kubeprof.agent.gpu.bundle) for pods of any Python 3.10-3.13: the
# kubeprof package in lib/, libcupti and pure-Python dependencies in deps/, and
# cupti-python with its compiled dependencies once per CPython minor in py/cp3XY/, and the C
# launch hook once per CPython minor beside the tracer in lib/ (from the hooks stage). The init
# container copies all of it (it cannot know the pod's Python); the tracer appends deps/
# and its own py/cp3XY/ to the end of sys.path at start, or says why it cannot.
RUN T=/opt/kubeprof/tracer \
 && mkdir -p $T/lib \
 && cp -r "$(/opt/kubeprof/bin/python -c 'import kubeprof, os; print(os.path.dirname(kubeprof.__path__[0]))')/kubeprof" $T/lib/ \
 && /opt/kubeprof/bin/pip install --no-cache-dir --no-deps --only-binary=:all: \
      --target $T/deps "nvidia-cuda-cupti~=13.4" "cuda-pathfinder>=1.4.1" pyelftools \
 && for t in 310 311 312 313; do \
      /opt/kubeprof/bin/pip install --no-cache-dir --no-deps --only-binary=:all: \
        --implementation cp --python-version "3.${t#3}" --abi "cp$t" \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 \
        --target "/opt/kubeprof/tracer/py/cp$t" \
        "cupti-python==$CUPTI_PYTHON" "cuda-bindings>=13.0.2" "numpy>=1.23" || exit 1; \
    done \
 && find $T -name '__pycache__' -prune -exec rm -rf {} +
COPY --from=hooks /out/ /opt/kubeprof/tracer/lib/kubeprof/agent/gpu/
RUN /opt/kubeprof/bin/python -c 'import sys; from pathlib import Path; from kubeprof.agent.gpu import bundle; t = Path(sys.argv[1]); have = (bundle.builds(t), bundle.hooks(t)); assert have == (list(bundle.VERSIONS),) * 2, have' /opt/kubeprof/tracer
WORKDIR /
ENV PATH=/opt/kubeprof/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Root inside the container, but without privileges: the DaemonSet drops ALL capabilities
# and adds only BPF, PERFMON, SYS_PTRACE and SYS_RESOURCE (see charts/kubeprof values).
ENTRYPOINT ["kubeprof", "agent"]
