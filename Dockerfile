# The image the weight-sync Jobs run: `standbyc weights sync`, and nothing the compiler
# needs besides (no pydantic, jinja2, ruamel.yaml, jsonschema or schemas).
#
#   make image                       # docker build -t standbyc:<version> .
#
# It runs as 65532:65532 with a read-only root filesystem: sync writes only beside its
# --target (the weights volume) and to /tmp (an emptyDir in the Job). A test holds this
# file and the compiled Job's securityContext, command and volumes against each other.
FROM docker.io/library/python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY compiler ./compiler
COPY templates ./templates
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels --constraint constraints.txt \
      numpy zstandard xxhash rich prometheus-client

FROM docker.io/library/python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels --no-deps /wheels/*.whl \
 && rm -rf /wheels
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["standbyc"]
CMD ["weights", "sync", "--help"]
