# One image for both the coordinator (`kgroups coordinator`) and the operator
# (`kgroups operator`); the chart picks the command. Runs as a non-root user with a
# read-only root filesystem (the coordinator writes only to its /data volume).
#   docker build -t ghcr.io/kgroups/kgroups:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin kgroups
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9092 9404 8080
ENTRYPOINT ["kgroups"]
CMD ["coordinator", "--listen", "0.0.0.0:9092", "--data-dir", "/data"]
