# TrainGuard's container image (the Helm chart's ghcr.io/trainguard/trainguard:<appVersion>): the
# `trainguard` CLI as entrypoint, so the chart's args pick the role (`api`, `worker --queues ...`).
#   docker build -t ghcr.io/trainguard/trainguard:0.1.0 .
# Dependencies are pinned in deploy/docker/requirements.txt (scripts/lock_image_requirements.py) and
# installed without resolving anything else. linux/amd64 (hyperscan wheels); Python as in CI.
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TRAINGUARD_HOME=/var/lib/trainguard

# A fixed, unprivileged user; the chart mounts its state directory (emptyDir) at /var/lib/trainguard.
RUN groupadd --system --gid 10001 trainguard \
    && useradd --system --uid 10001 --gid trainguard --no-create-home --home-dir /var/lib/trainguard \
       --shell /usr/sbin/nologin trainguard \
    && install -d -o trainguard -g trainguard -m 0750 /var/lib/trainguard

WORKDIR /opt/trainguard
COPY deploy/docker/requirements.txt ./requirements.txt
RUN pip install --no-cache-dir --no-deps --requirement requirements.txt

COPY pyproject.toml README.md ./
COPY trainguard ./trainguard
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
    && trainguard --help > /dev/null

USER 10001:10001
EXPOSE 8088 9100 9102
ENTRYPOINT ["trainguard"]
CMD ["--help"]
