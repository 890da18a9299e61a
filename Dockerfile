# The image the weight-sync Jobs run: `standbyc weights sync`, and nothing the compiler
# needs besides (no jinja2, ruamel.yaml, jsonschema or schemas; pydantic comes with
# sigstore, for signed generations).
#
#   make image                       # docker build -t standbyc:<version> .
#
# It runs as 65532:65532 with a read-only root filesystem: sync writes only beside its
# --target (the weights volume) and to /tmp (an emptyDir in the Job). A test holds this
# file and the compiled Job's securityContext, command and volumes against each other.

# The Argo CD config management plugin's sidecar (deploy/argocd/): the whole compiler,
# the validators and the offline schemas, so `standbyc argocd generate` validates what it
# prints. Build it with: docker build --target cmp -t standbyc-cmp:<version> .
FROM docker.io/library/python:3.11-slim AS cmp-build
COPY --from=docker.io/library/golang:1.26 /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH GOFLAGS=-mod=mod
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir --constraint constraints.txt . \
 && PYTHON=python3 bash scripts/install-tools.sh --validators-only

FROM docker.io/library/python:3.11-slim AS cmp
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp \
    STANDBYC_TOOLS_DIR=/opt/standbyc/bin STANDBYC_SCHEMA_DIR=/opt/standbyc/schemas
COPY --from=cmp-build /usr/local/lib/python3.11/site-packages /usr/local/lib/python3.11/site-packages
COPY --from=cmp-build /usr/local/bin/standbyc /usr/local/bin/standbyc
COPY --from=cmp-build /src/.tools/bin/ /opt/standbyc/bin/
COPY --from=cmp-build /src/.cache/schemas/ /opt/standbyc/schemas/
# Argo CD runs sidecar plugins as user 999.
USER 999:999
WORKDIR /tmp

# botocore (with jmespath, python-dateutil, urllib3; about 35 MB installed) signs the
# requests to a private s3:// store with the credentials of the environment, a profile or
# IRSA's web identity; the downloads stay standbyc's own (docs/weight-sync.md).
# model-signing (with sigstore, cryptography, pydantic, ...) verifies each generation's
# signature (weightSync.verify); it imports pyOpenSSL without declaring it.
FROM docker.io/library/python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY compiler ./compiler
COPY templates ./templates
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels --constraint constraints.txt \
      numpy zstandard xxhash rich prometheus-client botocore model-signing pyopenssl

# The default target (the last stage): the weight-sync Jobs' image.
FROM docker.io/library/python:3.11-slim AS sync
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels --no-deps /wheels/*.whl \
 && rm -rf /wheels
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["standbyc"]
CMD ["weights", "sync", "--help"]
