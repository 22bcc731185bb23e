#!/usr/bin/env bash
# Makes sure /usr/bin/python3 can import torch and numpy: the tests of the
# Hugging Face checkpoint loader compare troupe against
# benchmarks/compare/hf.py, an independent PyTorch reference.
#
# Idempotent: exits 0 at once when both import; otherwise installs
# Debian's python3-torch and python3-numpy (scripts/lib/apt.sh).
#
# Exit codes: 0 ok (already present or installed); 2 apt-get is missing or
# root rights are unavailable; 3 the install failed; 4 installed but the
# import still fails.
set -uo pipefail
. "$(dirname "$0")/lib/apt.sh"

PY=/usr/bin/python3
say() { echo "install-test-deps: $*" >&2; }

have() { "$PY" -c 'import torch, numpy' >/dev/null 2>&1; }
versions() { "$PY" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)'; }

if have; then
	say "ok: $(versions) already importable from $PY"
	exit 0
fi
say "$PY cannot import torch/numpy: apt-get install python3-torch python3-numpy"
apt_install python3-torch python3-numpy || exit $?
if ! have; then
	say "python3-torch and python3-numpy are installed but $PY still cannot import them:"
	"$PY" -c 'import torch, numpy' >&2 || true
	exit 4
fi
say "installed: $(versions)"
