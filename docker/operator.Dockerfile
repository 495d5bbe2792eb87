# The kubeprof operator image (`kubeprof operator`), as charts/kubeprof runs it: non-root
# (65532), read-only root file system, no compiler, no bcc. Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t REGISTRY/kubeprof-operator:0.1.0 .
# Pin the base by digest in your registry (docker buildx imagetools inspect ...) for
# reproducible builds; the tag below is the pin this repository was written against.
# Not built in this repository's CI: its machines have no container engine.
FROM docker.io/library/python:3.11.13-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY agent ./agent
COPY operator ./operator
RUN python -m venv /opt/kubeprof \
 && /opt/kubeprof/bin/pip install --no-cache-dir --upgrade pip==25.2 \
 && /opt/kubeprof/bin/pip install --no-cache-dir . \
 && find /opt/kubeprof -name '__pycache__' -prune -exec rm -rf {} +

FROM docker.io/library/python:3.11.13-slim-bookworm
COPY --from=build /opt/kubeprof /opt/kubeprof
ENV PATH=/opt/kubeprof/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kubeprof", "operator"]
