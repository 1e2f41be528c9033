#!/bin/sh
# `pip install ./python` as a new user runs it: a fresh virtual environment, the package built from
# this checkout (CMake through scikit-build-core; CPU backends only unless FLASHWATT_CUDA says
# otherwise, so CI does not compile the CUDA kernels a second time), then from another directory:
# the package loads its own libflashwatt, a NumPy call (and a torch call where torch is installed)
# matches a float64 reference, `python -m flashwatt info` lists the backends, the versions agree,
# and FLASHWATT_LIBRARY still overrides. Exit 77 (skipped) where no environment can be made or the
# build requirements cannot be had (no scikit-build-core here and no package index reachable).
#   pip_install_test.sh SOURCE_DIR VERSION      (PYTHON=... picks the interpreter; default python3)
set -u
src=$1 version=$2
py=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_pip_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# system site packages: NumPy (a dependency) and torch where the interpreter has them, without a download
if ! "$py" -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1; then
    echo "skipped: $py -m venv failed: $(tail -1 "$tmp/venv.log")"; exit 77
fi
vpy=$tmp/venv/bin/python
# and the packages of $py itself where it runs in a virtual environment (one that has torch, say):
# appended after the new environment's own, so its flashwatt comes first
"$py" -c "import site, sys; print('\n'.join(p for p in site.getsitepackages() if p.startswith(sys.prefix)))" \
    > "$("$vpy" -c "import sysconfig; print(sysconfig.get_path('purelib'))")/parent-env.pth"
isolation=""
"$vpy" -c "import scikit_build_core" 2>/dev/null && isolation=--no-build-isolation
unset FLASHWATT_LIBRARY
t0=$(date +%s)
if ! (cd "$tmp" && FLASHWATT_CUDA=${FLASHWATT_CUDA:-OFF} "$vpy" -m pip install -q $isolation "$src/python") \
        >"$tmp/pip.log" 2>&1; then
    if [ -z "$isolation" ] && grep -qiE "no matching distribution|could not find a version|connection|network|resolve" "$tmp/pip.log"; then
        echo "skipped: scikit-build-core is not installed here and the package index is not reachable:"
        tail -3 "$tmp/pip.log"; exit 77
    fi
    sed 's/^/    /' "$tmp/pip.log" | tail -40
    fail "pip install ./python"
    exit 1
fi
echo "ok: pip install ./python ($(( $(date +%s) - t0 )) s, build isolation: ${isolation:-yes})"

# NumPy is a requirement of the package itself, not an extra that a plain `pip install` leaves out
if "$vpy" -c "import importlib.metadata as m, re, sys
req = [r for r in (m.requires('flashwatt') or []) if re.match(r'numpy\b', r) and 'extra' not in r]
sys.exit(0 if req else 1)"; then echo "ok: NumPy is a requirement of the installed package"
else fail "the installed package does not require NumPy"; fi

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere" || exit 1
if "$vpy" - "$version" <<'PY'
import os, sys
import numpy as np
import flashwatt

site = os.path.dirname(flashwatt.__file__)
assert flashwatt.library_path() == os.path.join(site, "libflashwatt.so"), flashwatt.library_path()
assert "site-packages" in site, site
assert flashwatt.__version__ == flashwatt.version() == sys.argv[1], (flashwatt.__version__, flashwatt.version())

def reference(q, k, v, causal):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        lq, lk = s.shape[-2:]
        s = np.where(np.arange(lk)[None, :] <= np.arange(lq)[:, None] + lk - lq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v

rng = np.random.default_rng(3)
q, k, v = (rng.standard_normal((2, 4, 67, 40)).astype(np.float32) for _ in range(3))
err = np.abs(flashwatt.attention(q, k, v, causal=True) - reference(q, k, v, True)).max()
assert err <= 1e-5 * np.abs(v).max(), err
print(f"ok: NumPy call against float64: max error {err:.1e} ({flashwatt.default_context().last_backend})")
try:
    import torch
except ImportError:
    print("note: torch is not installed here: the torch call is not tried")
else:
    qt, kt, vt = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    o = flashwatt.attention(qt, kt, vt, causal=True)
    err = np.abs(o.detach().numpy() - reference(q, k, v, True)).max()
    assert err <= 1e-5 * np.abs(v).max(), err
    o.sum().backward()
    assert all(t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in (qt, kt, vt))
    print(f"ok: torch {torch.__version__} call against float64: max error {err:.1e}; backward ran")
PY
then :; else fail "the installed package from another directory"; fi

out=$("$vpy" -m flashwatt info 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "cpu-ref .*usable" && echo "$out" | grep -q "^flashwatt $version "; then
    echo "ok: python -m flashwatt info"; echo "$out" | sed 's/^/    /'
else
    fail "python -m flashwatt info:"; echo "$out" | sed 's/^/    /'
fi
out=$(FLASHWATT_LIBRARY=/nonexistent/libflashwatt.so "$vpy" -c "import flashwatt; flashwatt.version()" 2>&1)
if echo "$out" | grep -q "/nonexistent/libflashwatt.so (absent)"; then
    echo "ok: FLASHWATT_LIBRARY overrides the package's copy"
else
    fail "FLASHWATT_LIBRARY=/nonexistent did not take precedence:"; echo "$out" | tail -5
fi
echo "pip_install_test: $failures failed"
[ "$failures" -eq 0 ]
