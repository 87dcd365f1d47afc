#!/usr/bin/env bash
# The real Isaac Lab 3.0 for the test suite, in its own Python 3.12 venv (.venv-isaaclab): 3.0
# needs Python 3.12 exactly and pins its own torch (2.11.0; hpctrain's venv keeps 2.13.0). Then
#   - a minimal asset root (tests/programs/isaac_asset_root.py: Cartpole from the newton wheel, a
#     ground plane), so that no test downloads an asset: the test cluster's nodes, like most
#     compute nodes, have no internet;
#   - Warp's kernel cache, built once by a 1-iteration training (~40 core-seconds), so that no
#     test job compiles kernels.
# Every cache lives under the venv (uv's downloads, Warp's kernels, XDG's): nothing in $HOME.
# Idempotent: a finished install is recognised and left alone (~1 s).
#
#   bash scripts/install-isaaclab.sh [VENV]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${1:-.venv-isaaclab}
RELEASE=3.0.0
MARK="$VENV/.hpctrain-isaaclab-$RELEASE"
# onnxruntime checks `hpctrain export`'s ONNX files under the run's interpreter (added after
# the first installs: a finished venv without it gets it alone).
EXTRA=(onnxruntime)
if [[ -e "$MARK" && -x "$VENV/bin/python" ]]; then
    if ! "$VENV/bin/python" -c 'import onnxruntime' 2>/dev/null; then
        UV_CACHE_DIR="$VENV/cache/uv" "$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" "${EXTRA[@]}"
    fi
    echo "Isaac Lab venv ready: $VENV"
    exit 0
fi
# Python 3.12: on PATH (a pyenv shim there may not run it), else pyenv's own (the project's
# machines have one).
py312=
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for candidate in "$(command -v python3.12 || true)" "$root"/versions/3.12*/bin/python3.12; do
    if [[ -n "$candidate" ]] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        py312=$candidate
        break
    fi
done
[[ -n "$py312" ]] || { echo "install-isaaclab: no Python 3.12 (Isaac Lab $RELEASE needs it): install one, e.g. pyenv install 3.12" >&2; exit 1; }
[[ -x "$VENV/bin/python" ]] || "$py312" -m venv "$VENV"
VENV=$(cd "$VENV" && pwd)
export UV_CACHE_DIR="$VENV/cache/uv" WARP_CACHE_PATH="$VENV/cache/warp" XDG_CACHE_HOME="$VENV/cache/xdg" \
    PIP_CACHE_DIR="$VENV/cache/pip"
"$VENV/bin/pip" install -q --disable-pip-version-check uv
# rl-games has no extra in 3.0 (its checkout pins a git fork): PyPI's 1.6.5 trains with it, and
# isaaclab_rl's rl-games wrapper imports gym beside gymnasium.
"$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" \
    "isaaclab[rsl-rl,skrl]==$RELEASE" "rl-games==1.6.5" gym "${EXTRA[@]}"
"$VENV/bin/python" tests/programs/isaac_asset_root.py "$VENV/assets"
# Warp's kernels: one short training in a scratch folder (its logs are not kept). It also writes
# the bytecode of exactly the modules a rank imports (~3,600 of the venv's ~26,000): every rank
# would otherwise compile Isaac Lab's, torch's and Warp's modules anew (~9 core-seconds of its
# ~18-second start) wherever PYTHONDONTWRITEBYTECODE is set, as on this project's machines.
# uv's --compile-bytecode compiled all of them instead (~48 core-seconds, the same rank start).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && env -u PYTHONDONTWRITEBYTECODE ISAACSIM_ASSET_ROOT="$VENV/assets" "$VENV/bin/python" \
    -m isaaclab train --rl_library rsl_rl --task Isaac-Cartpole --device cpu --num_envs 16 \
    --max_iterations 1 agent.device=cpu >"$scratch/warm.log" 2>&1) || { tail -n 40 "$scratch/warm.log" >&2; exit 1; }
# ...and the other two libraries' trainers, which that training does not import.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$VENV/bin/python" -m compileall -q "$site/rl_games" "$site/skrl" "$site/gym" "$site/isaaclab_rl" >/dev/null
touch "$MARK"
echo "Isaac Lab $RELEASE venv installed: $VENV (assets $VENV/assets, Warp's cache $WARP_CACHE_PATH)"
