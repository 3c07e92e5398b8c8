#!/bin/sh
# Register the custom search attributes Replaybook's workflows set (all Keyword) on the
# namespace, creating the namespace first if it does not exist. Idempotent: run it on every
# deployment. Uses the `temporal` CLI, which reads TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and,
# for a secured cluster, TEMPORAL_TLS_CERT / TEMPORAL_TLS_KEY / TEMPORAL_API_KEY itself.
#
# The list must match devstack/temporal_server.py SEARCH_ATTRIBUTES (a test checks it).
set -eu
TEMPORAL="${TEMPORAL_CLI:-temporal}"
address="${TEMPORAL_ADDRESS:-127.0.0.1:7233}"
namespace="${TEMPORAL_NAMESPACE:-default}"
attributes="ReplayStatus SourceRunId ReplayMode IncidentId IncidentPhase FailureSignature"

if ! "$TEMPORAL" operator namespace describe --address "$address" --namespace "$namespace" >/dev/null 2>&1; then
  echo "creating namespace $namespace"
  "$TEMPORAL" operator namespace create --address "$address" --namespace "$namespace" --retention 7d
fi

# a new namespace becomes usable when the frontends refresh their namespace cache: poll
tries=0
until registered="$("$TEMPORAL" operator search-attribute list --address "$address" \
    --namespace "$namespace" --output json 2>/dev/null)"; do
  tries=$((tries + 1))
  if [ "$tries" -ge 120 ]; then
    echo "namespace $namespace is not usable after 60 s" >&2
    exit 1
  fi
  sleep 0.5
done
for name in $attributes; do
  if printf '%s' "$registered" | grep -q "\"$name\""; then
    echo "search attribute $name: already registered"
  else
    "$TEMPORAL" operator search-attribute create --address "$address" --namespace "$namespace" \
      --name "$name" --type Keyword
    echo "search attribute $name: registered (Keyword)"
  fi
done
