# Sourced by the GPU checks (with D set to the carried .dev folder): memcached and memcaslap
# from Debian 12, carried in .dev/lib with their libraries (scripts/gpu/README.md), behind
# wrappers on PATH, since the GPU machine has neither and reaches no package registry.
mkdir -p /tmp/bin
for p in memcached memcaslap; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib exec %s/lib/%s "$@"\n' "$D" "$D" "$p" > /tmp/bin/$p
  chmod +x /tmp/bin/$p
done
export PATH=/tmp/bin:$PATH
