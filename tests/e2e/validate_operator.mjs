// Validates prometheus-operator objects (a JSON list on stdin) against the operator's own
// CRD schemas, as compiled into npm's @kubernetes-models/prometheus-operator (its validators
// are generated from the operator's published CRDs: required fields, types, enums, patterns).
// Usage: node validate_operator.mjs NPM_PREFIX < objects.json; prints one line per object.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync } from "node:fs";

const prefix = process.argv[2];
const pkg = join(prefix, "node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1");
const docs = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const doc of docs) {
  const mod = await import(pathToFileURL(join(pkg, `${doc.kind}.js`)).href);
  try {
    new mod[doc.kind](doc).validate();
    console.log(`ok ${doc.kind}/${doc.metadata.name}`);
  } catch (e) {
    failed++;
    console.log(`INVALID ${doc.kind}/${doc.metadata.name}: ${e.message}`);
  }
}
process.exit(failed ? 1 : 0);
