#!/bin/sh
# scripts/lint.py (make lint) on a small tree of its own: the tree passes,
# then each rule fails on one planted violation with its own message, on a
# fresh copy of the tree each time. The tree: the CRD and its two copies,
# common/encoding.h's enum and the proto's, C files whose functions are 80
# body lines or carry a "Long because" or "Long:" comment, headers that include each other
# without a cycle, and a doc whose cited paths exist (and some that are
# not paths: a placeholder, a URL, build/ and /tmp paths).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LINT="/usr/bin/python3 $ROOT/scripts/lint.py"
dir=$(mktemp -d /tmp/ddiloco-lint-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$dir/out" ] && cat "$dir/out"
	exit 1
}

# body N: a function of N body lines
body() {
	i=0
	while [ "$i" -lt "$1" ]; do
		echo "	x += $i;"
		i=$((i + 1))
	done
}

t=$dir/clean
mkdir -p "$t/crds" "$t/deploy" "$t/charts/ddiloco/crds" "$t/common" \
	"$t/proto/ddiloco/v1" "$t/runner" "$t/tests/unit" "$t/docs"
cp "$ROOT/crds/decoupledtrainingjobs.yaml" "$t/crds/"
cp "$ROOT/crds/decoupledtrainingjobs.yaml" "$t/deploy/01-crd.yaml"
cp "$ROOT/crds/decoupledtrainingjobs.yaml" "$t/charts/ddiloco/crds/"
grep '^enum payload_enc' "$ROOT/common/encoding.h" > "$t/common/encoding.h"
sed -n '/^enum Encoding/,/^}/p' "$ROOT/proto/ddiloco/v1/syncer.proto" |
	sed 's| *//.*||' > "$t/proto/ddiloco/v1/syncer.proto"
grep -q ENC_F32 "$t/common/encoding.h" || fail "no enum payload_enc in common/encoding.h"
grep -q ENCODING_F32 "$t/proto/ddiloco/v1/syncer.proto" || fail "no enum Encoding in the proto"
{
	echo '#include "common/a.h"'
	echo 'int at_most(int x);'
	echo 'int at_most(int x)'
	echo '{'
	body 79
	echo '	return x;'
	echo '}'
	echo ''
	echo 'int marked_above(int x);'
	echo '/*'
	echo ' * Long: one table, read top to bottom.'
	echo ' */'
	echo 'int'
	echo 'marked_above(int x)'
	echo '{'
	body 90
	echo '	return x;'
	echo '}'
	echo ''
	echo 'int marked_inside(int x);'
	echo 'int marked_inside(int x)'
	echo '{'
	echo '	/* Long because it is a switch of every kind */'
	body 90
	echo '	return x;'
	echo '}'
} > "$t/runner/ok.c"
{
	echo 'static int test_long(int x)'
	echo '{'
	body 100
	echo '	return x;'
	echo '}'
} > "$t/tests/unit/test_long.c"
printf '#include "b.h"\n' > "$t/common/a.h"
printf '#include <stdio.h>\n#include "ddiloco/v1/syncer.pb-c.h"\n' > "$t/common/b.h"
cat > "$t/docs/x.md" <<'MD'
# x

runner/ok.c and docs/x.md, the folder runner/, common/*.h, [a link](x.md)
and [another](../runner/ok.c#L1); tests/unit/test_<module>.c and
syncer/NAME.c are placeholders; https://example.org/docs/none.md,
build/ddiloco, build/gen/ddiloco/v1/syncer.pb-c.h and /tmp/syncer/none.c
are not the tree's; the operator/syncer pair is prose.
MD

lint_ok() {
	$LINT "$1" > "$dir/out" 2>&1 || fail "$2: lint failed"
}
# lint_fails TREE RULE TEXT: lint fails, and a line of its output names
# RULE and holds TEXT
lint_fails() {
	if $LINT "$1" > "$dir/out" 2>&1; then
		fail "$2: lint passed"
	fi
	grep -F ": $2: " "$dir/out" | grep -qF -- "$3" ||
		fail "$2: no line '...: $2: ...$3...'"
	echo "ok: $2: $(grep -F ": $2: " "$dir/out" | grep -F -- "$3" | head -n 1)"
}
# plant NAME: a fresh copy of the clean tree
plant() {
	rm -rf "$dir/$1"
	cp -R "$t" "$dir/$1"
	p=$dir/$1
}

lint_ok "$t" "the clean tree"
echo "ok: the clean tree passes"

plant long-function
{
	echo 'int too_long(int x);'
	echo 'int too_long(int x)'
	echo '{'
	body 80
	echo '	/* a comment, but not why */'
	echo '	return x;'
	echo '}'
} > "$p/runner/long.c"
lint_fails "$p" long-function "runner/long.c:2: long-function: too_long has 82 body lines"

plant long-file
body 1501 > "$p/common/big.h"
lint_fails "$p" long-file "common/big.h:1501: long-file: 1501 lines (at most 1500)"

plant include-cycle
printf '#include "b.h"\n' > "$p/common/a.h"
printf '#include "common/a.h"\n' > "$p/common/b.h"
lint_fails "$p" include-cycle "common/a.h -> common/b.h -> common/a.h"

plant module-cycle
printf '#include "runner/r.h"\n' > "$p/common/b.h"
printf '#include "common/c.h"\n' > "$p/runner/r.h"
: > "$p/common/c.h"
lint_fails "$p" include-cycle "module cycle common -> runner -> common"

plant crd-copy
sed 's/default: int8}/default: bf16}/' "$ROOT/crds/decoupledtrainingjobs.yaml" \
	> "$p/deploy/01-crd.yaml"
line=$(grep -n 'default: int8}' "$ROOT/crds/decoupledtrainingjobs.yaml" | head -n 1 | cut -d: -f1)
lint_fails "$p" crd-copy "deploy/01-crd.yaml:$line: crd-copy: differs from crds/decoupledtrainingjobs.yaml"
rm "$p/charts/ddiloco/crds/decoupledtrainingjobs.yaml"
lint_fails "$p" crd-copy "charts/ddiloco/crds/decoupledtrainingjobs.yaml:1: crd-copy: missing"
$LINT --write-crds "$p" > "$dir/out" 2>&1 || fail "lint.py --write-crds failed"
lint_ok "$p" "the copies written again"
echo "ok: crd-copy: --write-crds writes the copies again"

plant crd-hash
# a schema changed without make crds: its hash is stale, in every copy
for f in crds/decoupledtrainingjobs.yaml deploy/01-crd.yaml charts/ddiloco/crds/decoupledtrainingjobs.yaml; do
	sed -i 's/default: int8}/default: bf16}/' "$p/$f"
done
line=$(grep -n 'ddiloco.io/schema-hash' "$ROOT/crds/decoupledtrainingjobs.yaml" | cut -d: -f1)
lint_fails "$p" crd-copy "crds/decoupledtrainingjobs.yaml:$line: crd-copy: its ddiloco.io/schema-hash is stale: run make crds"
$LINT --write-crds "$p" > "$dir/out" 2>&1 || fail "lint.py --write-crds failed"
grep -q "the schema hash of crds/decoupledtrainingjobs.yaml is" "$dir/out" || fail "--write-crds did not say the new hash"
lint_ok "$p" "the hash written again"
echo "ok: crd-copy: a stale schema hash, written again by --write-crds"

plant encoding-enum
sed 's/ENC_INT4 = 3/ENC_INT4 = 3, ENC_FP8 = 4/' "$t/common/encoding.h" > "$p/common/encoding.h"
lint_fails "$p" encoding-enum "common/encoding.h:1: encoding-enum: enum payload_enc"
lint_fails "$p" encoding-enum "updateEncoding's enum [bf16, f32, int4, int8] is not common/encoding.h's encodings [bf16, f32, fp8, int4, int8]"

plant doc-path
echo 'See syncer/missing.c.' >> "$p/docs/x.md"
echo '/* docs/gone.md, section 2 */' >> "$p/runner/ok.c"
echo '[gone](gone.md)' >> "$p/docs/x.md"
lint_fails "$p" doc-path "docs/x.md:8: doc-path: 'syncer/missing.c' does not exist"
lint_fails "$p" doc-path "docs/x.md:9: doc-path: link 'gone.md' does not exist"
lint_fails "$p" doc-path "runner/ok.c:$(wc -l < "$p/runner/ok.c" | tr -d ' '): doc-path: 'docs/gone.md' does not exist"

echo "ok: lint"
