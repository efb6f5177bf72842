#!/usr/bin/env bash
# The documentation budget (make docs-check, run by make lint): Markdown
# words per line of Go code at most 1.0, no Markdown file over 20,000
# bytes, every relative link and #anchor resolving, and every decision
# cited as "docs/design.md [name]" a heading there. Words: wc -w over
# the tracked .md files. Lines: the tracked non-test .go files' lines that
# are neither blank nor a // comment. Prints the figures; exits 1 on any
# breach, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_RATIO=${MAX_RATIO:-1.0}
MAX_BYTES=${MAX_BYTES:-20000}

words=$(git ls-files -z '*.md' | xargs -0 cat | wc -w)
lines=$(git ls-files -z '*.go' | grep -zv '_test\.go$' | xargs -0 cat |
  awk '{ sub(/^[ \t]+/, "") } $0 != "" && !/^\/\// { n++ } END { print n + 0 }')
ratio=$(awk -v w="$words" -v l="$lines" 'BEGIN { printf "%.2f", (l ? w / l : 0) }')
fail=0

echo "docs budget: $words Markdown words / $lines Go code lines = $ratio words per line (at most $MAX_RATIO)"
if awk -v r="$ratio" -v m="$MAX_RATIO" 'BEGIN { exit !(r > m) }'; then
  echo "docs budget: over $MAX_RATIO words per line; the wordiest files:"
  git ls-files -z '*.md' | xargs -0 wc -w | grep -v ' total$' | sort -rn | head -8 | sed 's/^/  /'
  fail=1
fi

big=$(git ls-files -z '*.md' | xargs -0 wc -c | grep -v ' total$' | awk -v m="$MAX_BYTES" '$1 > m')
if [ -n "$big" ]; then
  echo "docs budget: Markdown files over $MAX_BYTES bytes:"
  echo "$big" | sed 's/^/  /'
  fail=1
fi

go run ./internal/doclinks || fail=1
exit $fail
