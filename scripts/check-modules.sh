#!/usr/bin/env bash
# The module import graph of every crate in the workspace, from the source: fails on any
# import loop, printing each cycle with the file:line of each edge. How parent and child
# modules count, and what is an edge, is in the header of scripts/check-modules.py.
#
#   scripts/check-modules.sh                     check the workspace
#   scripts/check-modules.sh --exclude src/mock  leave a folder out (for a module being untangled)
#   scripts/check-modules.sh --edges             also print every edge
#   scripts/check-modules.sh --layers            also print each crate's modules layer by layer
#   scripts/check-modules.sh --self-test         a fixture with a loop must fail, without it pass
set -euo pipefail
exec python3 "$(dirname "$0")/check-modules.py" "$@"
