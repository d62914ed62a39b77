# Sourced by the integration scripts (not run on its own: it is no
# test_*.sh): readers of a run's report.json as `ddiloco run` writes it,
# two spaces an indent, one key a line (docs/run.md).
#   field KEY FILE          a top-level value as written ("done" quoted)
#   sub OBJECT KEY FILE     a count inside one of the top-level objects
field() { sed -n "s/^  \"$1\": \(.*\),\$/\1/p" "$2" | head -n 1; }
sub() { sed -n "/^  \"$1\": {/,/^  }/s/^    \"$2\": \([0-9]*\),\{0,1\}\$/\1/p" "$3"; }
