# The kubeprof agent image (`kubeprof agent`), run by each session's DaemonSet and by the
# light agent's (`kubeprof agent --light`, which reads NVML through nvidia-ml-py; the NVML
# library itself, libnvidia-ml.so, comes from the node's driver), and the source of the GPU
# tracer the injection webhook's init container copies into pods. bcc comes from Debian
# (python3-bpfcc; the PyPI "bcc" is unrelated), so the agent's Python is Debian's python3
# with system site-packages. Kernel headers are not in the image: the DaemonSet mounts the
# node's /lib/modules and /usr/src read-only. Built here by `make images`
# (scripts/build_images.sh: podman, BASE = a Debian bookworm made with mmdebstrap); elsewhere,
# from the repository root:
#   docker buildx build -f docker/agent.Dockerfile -t ghcr.io/kubeprof/kubeprof-agent:0.1.0 .
# The tag is the chart's appVersion (charts/kubeprof/Chart.yaml). Pin BASE by digest in your
# registry for reproducible builds. The image has no compiler, pip or build tree.
# A TLS-intercepting proxy's CA for pip, when the build needs one, comes in as the build
# secret `ca` (`--secret id=ca,src=FILE`): mounted for the pip steps only (at /tmp/ca.pem, not
# /run/secrets, whose folder the mount would leave in a layer), in no layer.
# Layers: runtime, the tracer bundle's downloads, the dependencies (keyed on pyproject.toml's
# list alone), then kubeprof itself (--no-deps): a source change rebuilds only that last,
# thin layer.
ARG BASE=docker.io/library/debian:12.11-slim

# What the agent runs on: Debian's python3 and bcc.
FROM ${BASE} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-bpfcc ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old

# The dependency lists, from pyproject.toml: a change elsewhere in it leaves them the same,
# and the layers that install them are kept (COPY compares contents).
FROM runtime AS reqs
COPY pyproject.toml docker/dependencies.py /r/
RUN python3 /r/dependencies.py /r/pyproject.toml /r

# Build tools, for the build stages and in no layer of the image: pip, the wheel's backend.
# (The same steps as the operator's, so both images share these layers.)
FROM ${BASE} AS tools
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
 && python3 -m venv /opt/tools
COPY --from=reqs /r/build.txt /tmp/build.txt
RUN --mount=type=secret,id=ca,target=/tmp/ca.pem \
    { [ ! -s /tmp/ca.pem ] || export PIP_CERT=/tmp/ca.pem; } \
 && /opt/tools/bin/pip install --no-cache-dir --disable-pip-version-check -r /tmp/build.txt

# The tracer's C launch hook, built once against CPython's stable ABI (3.10): the one
# _launchhook.abi3.so loads in every Python of the bundle (3.10-3.13), and needs only libc
# and libdl from the pod's distribution.
FROM ${BASE} AS hooks
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev python3-dev
COPY scripts/build_launchhook.sh /b/scripts/
COPY agent/kubeprof/agent/gpu/_launchhook.c /b/agent/kubeprof/agent/gpu/
RUN /b/scripts/build_launchhook.sh python3 /out && ls /out/_launchhook.abi3.so

# The tracer bundle (kubeprof.agent.gpu.bundle) for pods of any Python 3.10-3.13: the
# kubeprof package in lib/ (the last layer), libcupti and pure-Python dependencies in deps/,
# and cupti-python with its compiled dependencies once per CPython minor in py/cp3XY/, and
# the C launch hook (one stable-ABI build) beside the tracer in lib/. The init container
# copies all of it (it cannot know the pod's Python); the tracer appends deps/ and its own
# py/cp3XY/ to the end of sys.path at start, or says why it cannot. Then the agent's own
# venv (no pip of its own: pip runs from the tools, inside its interpreter) with kubeprof's
# dependencies and nvidia-ml-py (the light agent's NVML). Built beside the image and copied
# into it whole: the copy is kept while its contents are the same.
FROM tools AS venv
ARG CUPTI_PYTHON=13.4.0
RUN python3 -m venv --without-pip --system-site-packages /opt/kubeprof
RUN --mount=type=secret,id=ca,target=/tmp/ca.pem \
    { [ ! -s /tmp/ca.pem ] || export PIP_CERT=/tmp/ca.pem; } \
 && PIP="/opt/tools/bin/pip --no-cache-dir --disable-pip-version-check --python /opt/kubeprof/bin/python3" \
 && T=/opt/kubeprof/tracer \
 && $PIP install --no-deps --no-compile --only-binary=:all: \
      --target $T/deps "nvidia-cuda-cupti~=13.4" "cuda-pathfinder>=1.4.1" pyelftools \
 && for t in 310 311 312 313; do \
      $PIP install --no-deps --no-compile --only-binary=:all: \
        --implementation cp --python-version "3.${t#3}" --abi "cp$t" \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 \
        --target "/opt/kubeprof/tracer/py/cp$t" \
        "cupti-python==$CUPTI_PYTHON" "cuda-bindings>=13.0.2" "numpy>=1.23" || exit 1; \
    done
COPY --from=reqs /r/runtime.txt /tmp/kubeprof-runtime.txt
RUN --mount=type=secret,id=ca,target=/tmp/ca.pem \
    { [ ! -s /tmp/ca.pem ] || export PIP_CERT=/tmp/ca.pem; } \
 && /opt/tools/bin/pip --no-cache-dir --disable-pip-version-check --python /opt/kubeprof/bin/python3 \
      install --no-compile -r /tmp/kubeprof-runtime.txt "nvidia-ml-py>=12" \
 && find /opt/kubeprof -name '__pycache__' -prune -exec rm -rf {} +

FROM runtime AS deps
COPY --from=venv /opt/kubeprof /opt/kubeprof

# kubeprof itself, staged in /stage for the image's last layer, the C launch hook beside the
# tracer in both copies (the agent's and the bundle's lib/); the build fails when a build of
# the bundle or the hook is missing (nothing installs at run time).
FROM deps AS app
COPY --from=tools /opt/tools /opt/tools
COPY pyproject.toml README.md hatch_build.py docker/install_kubeprof.sh /src/
COPY src /src/src
COPY agent /src/agent
COPY operator /src/operator
COPY --from=hooks /out/_launchhook.abi3.so /opt/kubeprof/tracer/lib/kubeprof/agent/gpu/
RUN /src/install_kubeprof.sh /stage /opt/kubeprof/tracer/lib/kubeprof/agent/gpu/_launchhook.abi3.so \
 && /opt/kubeprof/bin/python -c 'import bcc, pynvml, kubeprof.cli' \
 && /opt/kubeprof/bin/python -c 'import sys; from pathlib import Path; from kubeprof.agent.gpu import bundle, _launchhook; t = Path(sys.argv[1]); have = (bundle.builds(t), bundle.hooks(t)); assert have == (list(bundle.VERSIONS),) * 2, have' /opt/kubeprof/tracer

FROM deps
COPY --from=app /stage/ /
WORKDIR /
ENV PATH=/opt/kubeprof/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Root inside the container, but without privileges: the DaemonSet drops ALL capabilities
# and adds only BPF, PERFMON and SYS_PTRACE (SYS_RESOURCE on kernels before 5.11).
ENTRYPOINT ["kubeprof", "agent"]
