#!/usr/bin/env bash
# Grafana's dashboard JSON schema for tests/mixin: no Grafana server is installable here, so
# the schema is generated from the TypeScript Dashboard type npm @grafana/schema ships.
# Output: $KSE_CACHE/grafana-schema/dashboard.schema.json (KSE_CACHE defaults to ./.cache).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"

GRAFANA_SCHEMA_VERSION=13.2.3
GENERATOR_VERSION=2.10.0

repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=${KSE_CACHE:-$repo/.cache}/grafana-schema
out=$dir/dashboard.schema.json
stamp=$dir/.versions
want="@grafana/schema@$GRAFANA_SCHEMA_VERSION ts-json-schema-generator@$GENERATOR_VERSION"

if [[ -s $out && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    exit 0
fi

command -v npm >/dev/null || apt_need nodejs npm
mkdir -p "$dir"
cd "$dir"
[[ -f package.json ]] || echo '{"private": true}' > package.json
npm install --no-audit --no-fund --silent \
    "@grafana/schema@$GRAFANA_SCHEMA_VERSION" "ts-json-schema-generator@$GENERATOR_VERSION"

types=node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts
# Objects without an index signature reject unknown fields (the generator's default), which
# is the point of the check: a misspelt panel option fails instead of being ignored.
npx --no-install ts-json-schema-generator --path "$types" --type Dashboard \
    --no-type-check --out "$out.tmp"
mv "$out.tmp" "$out"
echo "$want" > "$stamp"
echo "grafana dashboard schema: $out"
