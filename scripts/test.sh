#!/usr/bin/env bash
# The README's test command: set up, build everything, run the sanitizer stage (AddressSanitizer +
# UndefinedBehaviorSanitizer over a representative set), then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc)
# ccache keys on paths relative to the checkout, so a fresh clone reuses earlier compilations.
export CCACHE_BASEDIR="$PWD" CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
if [ "${POLYMOE_SANITIZERS:-1}" = 1 ]; then
  ./scripts/sanitize.sh
fi
ctest --test-dir build -j"$jobs" --output-on-failure
