#!/usr/bin/env bash
# Writes the default model's training text: the King James Bible (public domain) from Debian's
# bible-kjv-text package, read with the bible-kjv package's `bible` program, one verse per
# line without the verse references (about 4.1 MB of ASCII). Installs the two packages when
# missing. Usage: scripts/make_corpus.sh [OUTPUT]   (default build/corpus/kjv.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/corpus/kjv.txt}
scripts/install_deps.sh bible-kjv bible-kjv-text
mkdir -p "$(dirname "$out")"
# -f turns pretty-printing off: one "Book1:1 text" line per verse. The reference is cut off.
bible -f gen1:1-rev22:21 </dev/null | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $(wc -c < "$out") bytes, $(wc -l < "$out") verses"
