# The stand-in for python:3.11-slim, which no image registry can give these machines:
# Debian's python3 (3.11) and pip on the locally built Debian base. Nothing else.
ARG BASE=kgroups/debian:bookworm
FROM ${BASE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       python3 python3-pip ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    # An image's own Python is ours to install into (PEP 668 guards a host's).
    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \
    && ln -s /usr/bin/python3 /usr/local/bin/python
CMD ["python3"]
