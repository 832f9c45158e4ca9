# An image with the Slacker agent and the system tools it drives.
# Run one container per node, e.g.:
#   docker run -v /srv/slacker:/srv/slacker -p 7701:7701 slacker agent --config /srv/slacker/agent.toml
FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      mariadb-server mariadb-backup mariadb-client pv netcat-openbsd iproute2 procps \
      python3 python3-venv python3-dev gcc pkg-config libmariadb-dev golang-go \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/slacker
COPY pyproject.toml README.md ./
COPY slacker ./slacker
COPY workloads ./workloads
COPY router ./router
RUN python3 -m venv /opt/slacker/.venv \
 && /opt/slacker/.venv/bin/pip install --no-cache-dir . \
 && (cd router && GOCACHE=/tmp/go-cache GOPROXY=off CGO_ENABLED=0 go build -trimpath -o /opt/slacker/.venv/bin/slacker-router .) \
 && rm -rf /tmp/go-cache && apt-get purge -y gcc python3-dev golang-go && apt-get autoremove -y
ENV PATH=/opt/slacker/.venv/bin:$PATH
EXPOSE 7701
ENTRYPOINT ["slacker"]
CMD ["agent", "--config", "/srv/slacker/agent.toml"]
