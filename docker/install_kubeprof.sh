#!/bin/sh
# Installs kubeprof itself, without its dependencies (the image's layers below have them,
# from docker/dependencies.py's list), into STAGE as it will lie in the image: the image's
# last layer is a copy of STAGE, so a source change rebuilds only that thin layer. Run by the
# Dockerfiles' `app` stage, with the build tools (pip, the wheel's build backend) in
# /opt/tools and the sources in /src:
#   install_kubeprof.sh STAGE [HOOK]
# HOOK (the agent's): the tracer's C launch hook, put into the package, which then goes into
# the tracer bundle's lib/ too (/opt/kubeprof/tracer/lib). Then STAGE is laid over this
# stage's own file system, where the Dockerfile checks it, and `pip check` fails the build
# when the installed dependencies no longer satisfy kubeprof's.
set -eu
STAGE=$1
HOOK=${2:-}
PY=/opt/kubeprof/bin/python3
PIP="/opt/tools/bin/pip --no-cache-dir --disable-pip-version-check"
$PIP wheel --quiet --no-deps --no-build-isolation --wheel-dir /tmp/wheel /src
# --python: pip runs inside the image's interpreter (its paths, the script's #! line),
# which has no pip of its own.
$PIP --python "$PY" install --quiet --no-warn-script-location --no-deps --no-compile \
    --root "$STAGE" /tmp/wheel/kubeprof-*.whl
if [ -n "$HOOK" ]; then
    pkg=$STAGE$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/kubeprof
    cp "$HOOK" "$pkg/agent/gpu/"
    mkdir -p "$STAGE/opt/kubeprof/tracer/lib"
    cp -r "$pkg" "$STAGE/opt/kubeprof/tracer/lib/"
fi
cp -a "$STAGE/." /
$PIP --python "$PY" check
