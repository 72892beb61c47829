#!/usr/bin/env bash
# Prints a prometheus-operator PrometheusRule holding the groups of
# deploy/prometheus/rules/*.yml (the one copy of the rules), for clusters
# whose Prometheus is run by the operator:
#   deploy/prometheus/prometheusrule.sh [NAMESPACE] | kubectl apply -f -
# Add labels your Prometheus's ruleSelector needs (kube-prometheus-stack:
# `release: <helm release>`) with RULE_LABELS='release: kps'.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
namespace=${1:-normsvc}
cat <<HEADER
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: normsvc
  namespace: ${namespace}
  labels:
    app.kubernetes.io/name: normsvc
HEADER
if [[ -n "${RULE_LABELS:-}" ]]; then
  printf '    %s\n' "$RULE_LABELS"
fi
echo "spec:"
echo "  groups:"
for file in "$here"/rules/*.yml; do
  # Everything after the file's top-level `groups:` line, indented one level.
  sed -n '/^groups:/,$p' "$file" | sed '1d' | sed 's/^\(.\)/  \1/'
done
