# The kubeprof operator image (`kubeprof operator`), as charts/kubeprof runs it: non-root
# (65532), read-only root file system, no compiler, no bcc, no pip. Built here by
# `make images` (scripts/build_images.sh: podman, BASE = a Debian bookworm made with
# mmdebstrap); elsewhere, from the repository root:
#   docker buildx build -f docker/operator.Dockerfile -t ghcr.io/kubeprof/kubeprof-operator:0.1.0 .
# The tag is the chart's appVersion (charts/kubeprof/Chart.yaml). Pin BASE by digest in your
# registry for reproducible builds; the default below is the tag this file was written against.
# The base only needs to be Debian bookworm: python3 is installed here when it lacks it.
# A TLS-intercepting proxy's CA for pip, when the build needs one, comes in as the build
# secret `ca` (`--secret id=ca,src=FILE`): mounted for the pip steps only (at /tmp/ca.pem, not
# /run/secrets, whose folder the mount would leave in a layer), in no layer.
# Layers: runtime, then the dependencies (keyed on pyproject.toml's list alone), then
# kubeprof itself (--no-deps): a source change rebuilds only that last, thin layer.
ARG BASE=docker.io/library/debian:12.11-slim

FROM ${BASE} AS runtime
RUN command -v python3 >/dev/null && [ -d /etc/ssl/certs ] || { apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/*; }

# The dependency lists, from pyproject.toml: a change elsewhere in it leaves them the same,
# and the layers that install them are kept (COPY compares contents).
FROM runtime AS reqs
COPY pyproject.toml docker/dependencies.py /r/
RUN python3 /r/dependencies.py /r/pyproject.toml /r

# Build tools, for the build stages and in no layer of the image: pip, the wheel's backend.
# (The same steps as the agent's, so both images share these layers.)
FROM ${BASE} AS tools
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
 && python3 -m venv /opt/tools
COPY --from=reqs /r/build.txt /tmp/build.txt
RUN --mount=type=secret,id=ca,target=/tmp/ca.pem \
    { [ ! -s /tmp/ca.pem ] || export PIP_CERT=/tmp/ca.pem; } \
 && /opt/tools/bin/pip install --no-cache-dir --disable-pip-version-check -r /tmp/build.txt

# kubeprof's dependencies in a venv with no pip of its own (pip runs from the tools, inside
# its interpreter), no bytecode cache; built beside the image and copied into it whole: the
# copy is kept while its contents are the same.
FROM tools AS venv
RUN python3 -m venv --without-pip /opt/kubeprof
COPY --from=reqs /r/runtime.txt /tmp/kubeprof-runtime.txt
RUN --mount=type=secret,id=ca,target=/tmp/ca.pem \
    { [ ! -s /tmp/ca.pem ] || export PIP_CERT=/tmp/ca.pem; } \
 && /opt/tools/bin/pip --no-cache-dir --disable-pip-version-check --python /opt/kubeprof/bin/python3 \
      install --no-compile -r /tmp/kubeprof-runtime.txt \
 && find /opt/kubeprof -name '__pycache__' -prune -exec rm -rf {} +

FROM runtime AS deps
COPY --from=venv /opt/kubeprof /opt/kubeprof

# kubeprof itself, staged in /stage for the image's last layer, and checked here.
FROM deps AS app
COPY --from=tools /opt/tools /opt/tools
COPY pyproject.toml README.md hatch_build.py docker/install_kubeprof.sh /src/
COPY src /src/src
COPY agent /src/agent
COPY operator /src/operator
RUN /src/install_kubeprof.sh /stage \
 && /opt/kubeprof/bin/kubeprof operator --help >/dev/null

FROM deps
COPY --from=app /stage/ /
WORKDIR /
ENV PATH=/opt/kubeprof/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kubeprof", "operator"]
