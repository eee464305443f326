// Validates the Prometheus Operator objects of rendered manifests (ServiceMonitor,
// PrometheusRule) against their schemas from @kubernetes-models/prometheus-operator (ajv).
// kubernetes-validate has no schemas for CRDs, so this covers what it skips.
//   node validate-crds.mjs [--expect Kind,Kind] FILE...
// Exits 1 on an invalid object, an unknown monitoring.coreos.com kind, or an expected kind
// that none of the files holds.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const models = { ServiceMonitor, PrometheusRule };
const args = process.argv.slice(2);
let expect = [];
if (args[0] === "--expect") {
  expect = args[1].split(",");
  args.splice(0, 2);
}

const seen = new Set();
let passed = 0;
let failed = 0;
for (const file of args) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const obj = doc.toJS();
    if (!obj || !String(obj.apiVersion ?? "").startsWith("monitoring.coreos.com/")) continue;
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    const Model = obj.apiVersion === "monitoring.coreos.com/v1" ? models[obj.kind] : undefined;
    if (!Model) {
      console.error(`FAIL ${where}: no schema for ${obj.apiVersion} ${obj.kind}`);
      failed++;
      continue;
    }
    try {
      new Model(obj).validate();
      seen.add(obj.kind);
      passed++;
      console.log(`PASS ${where}`);
    } catch (err) {
      failed++;
      console.error(`FAIL ${where}: ${err.message}`);
    }
  }
}
for (const kind of expect) {
  if (!seen.has(kind)) {
    console.error(`FAIL: no valid ${kind} in ${args.join(" ")}`);
    failed++;
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
