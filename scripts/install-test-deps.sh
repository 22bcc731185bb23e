#!/usr/bin/env bash
# Makes sure /usr/bin/python3 can import torch and numpy: the tests of the
# Hugging Face checkpoint loader compare troupe against
# benchmarks/compare/hf.py, an independent PyTorch reference.
#
# Idempotent: exits 0 at once when both import. Otherwise installs Debian's
# python3-torch and python3-numpy with apt-get (noninteractive, without
# recommends; through sudo when not root), running `apt-get update` once if
# the first install attempt fails (stale or empty package lists).
#
# Exit codes: 0 ok (already present or installed); 2 apt-get is missing or
# root rights are unavailable; 3 the install failed; 4 installed but the
# import still fails.
set -uo pipefail

PY=/usr/bin/python3
say() { echo "install-test-deps: $*" >&2; }

have() { "$PY" -c 'import torch, numpy' >/dev/null 2>&1; }

if have; then
	say "ok: $("$PY" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)') already importable from $PY"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	say "$PY cannot import torch/numpy and apt-get is missing: install PyTorch and numpy for $PY by hand"
	exit 2
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		say "$PY cannot import torch/numpy; installing needs root and sudo is missing"
		exit 2
	fi
	SUDO=(sudo -n)
fi
export DEBIAN_FRONTEND=noninteractive
install() {
	"${SUDO[@]}" apt-get install -y -qq --no-install-recommends python3-torch python3-numpy
}

say "$PY cannot import torch/numpy: apt-get install python3-torch python3-numpy"
if ! install; then
	say "install failed; running apt-get update once and retrying"
	if ! "${SUDO[@]}" apt-get update -qq; then
		say "apt-get update failed (no network or no package mirror?)"
		exit 3
	fi
	if ! install; then
		say "apt-get install python3-torch python3-numpy failed after apt-get update"
		exit 3
	fi
fi

if ! have; then
	say "python3-torch and python3-numpy are installed but $PY still cannot import them:"
	"$PY" -c 'import torch, numpy' >&2 || true
	exit 4
fi
say "installed: $("$PY" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')"
