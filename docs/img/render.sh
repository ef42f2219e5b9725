#!/usr/bin/env bash
# Renders docs/img/architecture.png from architecture.dot (needs graphviz: apt-get install -y graphviz).
set -euo pipefail
cd "$(dirname "$0")"
dot -Tpng -Gdpi=110 architecture.dot -o architecture.png
