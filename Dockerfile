# One image for every service role: API (`sodm serve`), worker (`sodm worker`), the one-off
# migration (`sodm migrate`) and the Spark Connect server (`sodm spark-connect`), which needs
# the JRE and the same solver package on the Spark side.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    SODM_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/tmp/numba-cache

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /srv/sodm
COPY requirements/image.txt ./requirements/
RUN pip install --require-hashes -r requirements/image.txt
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
COPY solver ./solver
COPY migrations ./migrations
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 sodm \
    && mkdir -p /data /metrics && chown sodm /data /metrics

USER sodm
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --retries=5 \
    CMD curl -fsS http://127.0.0.1:8000/livez || exit 1
CMD ["sodm", "serve", "--host", "0.0.0.0", "--port", "8000"]
