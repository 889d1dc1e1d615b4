#!/usr/bin/env bash
# Prints the transformers fixtures' folder for the device scripts: .dev/fixtures (a copy of
# ../shared/fixtures, carried to a device machine, whose ../shared may hold empty files), else
# ../shared/fixtures; says on stderr when neither holds them (their tests will then fail).
#   scripts/fixtures-dir.sh [WHO]   (WHO: the name the message starts with)
cd "$(dirname "$0")/.."
for d in "$PWD/.dev/fixtures" "$PWD/../shared/fixtures"; do
  [ -s "$d/hf/mixtral/config.json" ] && { echo "$d"; exit 0; }
done
echo "${1:-fixtures-dir}: no transformers fixtures here (cp -r ../shared/fixtures .dev/ and carry .dev): their tests will fail" >&2
echo "$PWD/../shared/fixtures"
