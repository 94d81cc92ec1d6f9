# One image for both the coordinator (`kgroups coordinator`) and the operator
# (`kgroups operator`); the chart picks the command. Runs as a non-root user with a
# read-only root filesystem (the coordinator writes only to its /data volume).
#
# The build installs wheels from the context and reaches no package index: deps/ holds the
# runtime dependencies (their layer is reused while the pins do not change), wheels/ the
# project's own. e2e/cluster/images.sh builds them on the host and the image on a Python
# base it also builds locally:
#   bash e2e/cluster/images.sh kgroups       # -> kgroups:dev, ghcr.io/kgroups/kgroups:0.1.0
# By hand, anywhere with a registry:
#   pip wheel --wheel-dir deps . && mkdir -p wheels && mv deps/kgroups-*.whl wheels/
#   docker build -t kgroups:dev .
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin kgroups
COPY deps /deps
RUN python3 -m pip install --no-cache-dir --no-index /deps/*.whl && rm -rf /deps
COPY wheels /wheels
RUN python3 -m pip install --no-cache-dir --no-index --find-links /wheels kgroups \
    && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9092 9404 8080
ENTRYPOINT ["kgroups"]
CMD ["coordinator", "--listen", "0.0.0.0:9092", "--data-dir", "/data"]
