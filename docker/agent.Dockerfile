# The kubeprof agent image (`kubeprof agent`), run by each session's DaemonSet and by the
# light agent's (`kubeprof agent --light`, which reads NVML through nvidia-ml-py; the NVML
# library itself, libnvidia-ml.so, comes from the node's driver). bcc comes
# from Debian (python3-bpfcc; the PyPI "bcc" is unrelated), so the agent's Python is
# Debian's python3 with system site-packages. Kernel headers are not in the image: the
# DaemonSet mounts the node's /lib/modules and /usr/src read-only. Build from the repo root:
#   docker build -f docker/agent.Dockerfile -t REGISTRY/kubeprof-agent:0.1.0 .
# Pin the base by digest for reproducible builds. Not built in this repository's CI: its
# machines have no container engine.
FROM docker.io/library/debian:12.11-slim
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
WORKDIR /
ENV PATH=/opt/kubeprof/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Root inside the container, but without privileges: the DaemonSet drops ALL capabilities
# and adds only BPF, PERFMON, SYS_PTRACE and SYS_RESOURCE (see charts/kubeprof values).
ENTRYPOINT ["kubeprof", "agent"]
