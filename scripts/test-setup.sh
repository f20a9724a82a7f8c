#!/usr/bin/env bash
# Prepares the machine for the real-stack tests: Postgres and Redis on 127.0.0.1 must be
# reachable (CI provides them); Debian's chromium is installed for the browser tests.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
