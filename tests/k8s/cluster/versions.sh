# Pinned versions of the test control plane (sourced by build.sh).
# Change one here and in the matching go.mod together.
KUBE_VERSION=v1.34.4
KUBE_MAJOR=1
KUBE_MINOR=34
KUBE_BUILD_DATE=2026-01-01T00:00:00Z
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.7.0
HELM_VERSION=v3.19.0
COREDNS_VERSION=v1.13.2
KUEUE_VERSION=v0.17.0
NETPOL_VERSION=v0.8.0
