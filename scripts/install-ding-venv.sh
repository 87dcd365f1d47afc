#!/usr/bin/env bash
# DI-engine in its own venv (.venv-ding): it cannot be installed beside torch 2.13 by pip's
# resolver (di-engine 0.5.3 pins setuptools<=66.1.1, torch 2.13 needs setuptools>=77), so:
# torch first (pinned, CPU wheel), DI-engine with --no-deps, then its other requirements minus
# the setuptools pin. Idempotent: a finished install is recognised and left alone (~1 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${1:-.venv-ding}
MARK="$VENV/.hpctrain-ding-0.5.3"
if [[ -e "$MARK" ]] && "$VENV/bin/python" -c "import ding, torch" 2>/dev/null; then
  echo "DI-engine venv ready: $VENV"
  exit 0
fi
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check -c constraints.txt)
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" --no-deps DI-engine==0.5.3
# DI-engine 0.5.3's own requirements, except setuptools<=66.1.1 (the conflict) and torch (above).
"${PIP[@]}" 'yapf==0.29.0' 'gym==0.25.1' gymnasium 'numpy>=1.18.0,<2' 'DI-treetensor>=0.4.0' \
  'DI-toolkit>=0.1.0' trueskill 'tensorboardX>=2.2' 'wandb<=0.19.0' matplotlib 'easydict>=1.9' \
  pyyaml enum-tools cloudpickle hickle tabulate 'click>=7.0.0' 'flask<=2.0.3' 'werkzeug<=2.0.3' \
  requests responses URLObject pynng sniffio redis 'mpire>=2.3.5' einops
"$VENV/bin/python" -c "import ding, torch" 2>/dev/null
touch "$MARK"
echo "DI-engine venv installed: $VENV"
