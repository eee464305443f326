#!/usr/bin/env bash
# Installs what statestore needs on Debian/Ubuntu: Mosquitto (broker and clients; its plugin
# headers and client library for the broker plugin's header test), the OpenSSL headers the
# official SDK client links against, protoc (etcd-client's build script, for the benchmark),
# etcd (the benchmark's baseline), strace (the durability test), and iproute2 and nftables
# (the fault tests put each node in its own network namespace), and libfaketime (the fault
# tests restart a node with a skewed clock), npm (the dashboards' and the Helm chart's
# checks), python3-venv (the Helm chart's checks), and Prometheus for promtool (the alert
# rules' unit tests) and for the dashboards' live test (tests/tests/t96_dashboards.rs starts
# its own server); its daemon is not left running; and fuse3 for fusermount3 (the power-cut
# test filesystem, tests/powercut-fs, mounts through it).
set -euo pipefail

missing=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
command -v mosquitto_pub >/dev/null 2>&1 || missing+=(mosquitto-clients)
# broker-plugin/tests/headers.rs compiles against the plugin API's headers (mosquitto_broker.h,
# mosquitto_plugin.h) and mosquitto.h, mqtt_protocol.h and libmosquitto.
[ -f /usr/include/mosquitto_broker.h ] || missing+=(mosquitto-dev)
[ -f /usr/include/mosquitto.h ] || missing+=(libmosquitto-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || missing+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# openssl makes the test certificates (t88 peer TLS, t99 statestore kv --tls, raft's peer_tls).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v strace >/dev/null 2>&1 || missing+=(strace)
[ -x /usr/bin/etcd ] || missing+=(etcd-server)
[ -x /usr/sbin/nft ] || [ -x /sbin/nft ] || missing+=(nftables)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
dpkg -s libfaketime >/dev/null 2>&1 || missing+=(libfaketime)
# tests/powercut-fs mounts (and its tests unmount) with fusermount3.
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
# node/npm for scripts/check-dashboards.sh (the dashboards' schema check) and
# scripts/check-helm.sh (helm binary, CRD schemas); tested with Node 20.
command -v npm >/dev/null 2>&1 || missing+=(npm)
# python3 -m venv for scripts/check-helm.sh's pinned PyPI tools (kubernetes-validate, ...).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
need_promtool=false
command -v promtool >/dev/null 2>&1 || need_promtool=true

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if $need_promtool; then
  echo "installing: prometheus (for promtool)"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # Only promtool is needed: stop the daemon the package starts.
  $sudo systemctl disable --now prometheus >/dev/null 2>&1 ||
    $sudo service prometheus stop >/dev/null 2>&1 || true
fi
