// Validates every object of a YAML stream (stdin: the rendered chart) against the Kubernetes API
// schemas of `kubernetes-models` (core and apps APIs, cert-manager, prometheus-operator). Prints
// one line per object and a closing "N valid, M invalid"; exits 1 on any invalid object, on an
// object of a kind it has no schema for, or on no object at all.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const MODULES = {
  "v1": (k) => `kubernetes-models/v1/${k}`,
  "apps/v1": (k) => `kubernetes-models/apps/v1/${k}`,
  "policy/v1": (k) => `kubernetes-models/policy/v1/${k}`,
  "cert-manager.io/v1": (k) => `@kubernetes-models/cert-manager/cert-manager.io/v1/${k}`,
  "monitoring.coreos.com/v1": (k) => `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${k}`,
};

const docs = parseAllDocuments(readFileSync(0, "utf8"));
let valid = 0;
let invalid = 0;
for (const d of docs) {
  if (d.errors.length) {
    console.log(`YAML error: ${d.errors[0].message}`);
    invalid++;
    continue;
  }
  const obj = d.toJS();
  if (obj == null) continue;
  const what = `${obj.apiVersion} ${obj.kind} ${obj.metadata?.name}`;
  const mod = MODULES[obj.apiVersion];
  if (!mod) {
    console.log(`INVALID ${what}: no schema for apiVersion ${obj.apiVersion}`);
    invalid++;
    continue;
  }
  let Model;
  try {
    Model = (await import(mod(obj.kind)))[obj.kind];
  } catch (e) {
    console.log(`INVALID ${what}: no schema for kind ${obj.kind}`);
    invalid++;
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`valid ${what}`);
    valid++;
  } catch (e) {
    console.log(`INVALID ${what}: ${e.message}`);
    invalid++;
  }
}
console.log(`${valid} valid, ${invalid} invalid`);
process.exit(invalid === 0 && valid > 0 ? 0 : 1);
