"""Renders the Helm chart offline with Helm's own engine (helm-python-sdk wraps Helm v4 as a
library: no cluster, no helm binary) and lints it strictly. Prints every rendered object as one
YAML stream on stdout; lint findings and render errors go to stderr with exit status 1.

    render.py CHART [--set-json '{"agent": {"engine": "vllm"}}'] [--namespace NS] [--release NAME]
              [--api-versions monitoring.coreos.com/v1/ServiceMonitor,...]

--api-versions adds API versions to the built-in ones that `.Capabilities.APIVersions` offers, as
`helm template --api-versions` does: a cluster with the prometheus-operator's CRDs.
"""
import argparse
import json
import sys

import helm_python
from helm_python import _native
from helm_python import chart as helm_chart


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("chart")
    ap.add_argument("--set-json", default="{}", help="values as JSON, merged over values.yaml")
    ap.add_argument("--namespace", default="fleetbench")
    ap.add_argument("--release", default="fleetbench")
    ap.add_argument("--kube-version", default="v1.31.0")
    ap.add_argument("--api-versions", default="", help="comma-separated, e.g. monitoring.coreos.com/v1/ServiceMonitor")
    a = ap.parse_args()
    values = json.loads(a.set_json)
    report = helm_chart.lint(a.chart, values, strict=True, namespace=a.namespace,
                             kube_version=a.kube_version)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    if problems or report.get("errors"):
        for m in problems:
            print(f"helm lint: {m.get('path')}: {m.get('error')}", file=sys.stderr)
        for e in report.get("errors") or []:
            print(f"helm lint: {e}", file=sys.stderr)
        return 1
    c = helm_python.Chart.load(a.chart)
    api_versions = [v for v in a.api_versions.split(",") if v]
    try:
        if api_versions:
            # Chart.render has no parameter for them; Helm's own render options do.
            opts = {"name": a.release, "namespace": a.namespace, "is_install": True,
                    "api_versions": api_versions}
            out = json.loads(_native.call_string("helm_render", c._raw(), json.dumps(values),
                                                 json.dumps(opts)))
        else:
            out = c.render(values, name=a.release, namespace=a.namespace, is_install=True)
    except Exception as e:  # HelmRenderError / HelmValuesError: the message names the template
        print(f"helm render: {e}", file=sys.stderr)
        return 1
    for path in sorted(out):
        body = out[path].strip()
        if not path.endswith((".yaml", ".yml")) or not body:
            continue
        print(f"---\n# Source: {path}\n{body}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
