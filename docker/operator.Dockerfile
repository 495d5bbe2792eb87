# The kubeprof operator image (`kubeprof operator`), as charts/kubeprof runs it: non-root
# (65532), read-only root file system, no compiler, no bcc, no pip. Built here by
# `make images` (scripts/build_images.sh: podman, BASE = a Debian bookworm made with
# mmdebstrap); elsewhere, from the repository root:
#   docker buildx build -f docker/operator.Dockerfile -t ghcr.io/kubeprof/kubeprof-operator:0.1.0 .
# The tag is the chart's appVersion (charts/kubeprof/Chart.yaml). Pin BASE by digest in your
# registry for reproducible builds; the default below is the tag this file was written against.
# The base only needs to be Debian bookworm: python3 is installed here when it lacks it.
# A TLS-intercepting proxy's CA for pip, when the build needs one, comes in as the build
# secret `ca` (`--secret id=ca,src=FILE`): mounted for the pip steps only, in no layer.
ARG BASE=docker.io/library/debian:12.11-slim

FROM ${BASE} AS runtime
RUN command -v python3 >/dev/null && [ -d /etc/ssl/certs ] || { apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/*; }

FROM runtime AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv
WORKDIR /src
COPY pyproject.toml README.md hatch_build.py ./
COPY src ./src
COPY agent ./agent
COPY operator ./operator
# The venv's own pip and setuptools go after the install: the final stage installs nothing.
RUN --mount=type=secret,id=ca { [ ! -s /run/secrets/ca ] || export PIP_CERT=/run/secrets/ca; } \
 && python3 -m venv /opt/kubeprof \
 && /opt/kubeprof/bin/pip install --no-cache-dir --disable-pip-version-check . \
 && /opt/kubeprof/bin/python -m pip uninstall -y -q pip setuptools \
 && find /opt/kubeprof -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/kubeprof/bin/kubeprof operator --help >/dev/null

FROM runtime
COPY --from=build /opt/kubeprof /opt/kubeprof
WORKDIR /
ENV PATH=/opt/kubeprof/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kubeprof", "operator"]
