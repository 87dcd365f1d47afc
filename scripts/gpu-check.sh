#!/bin/bash
# gpu-check.sh: does hpctrain train on this machine's GPU, end to end? Run it on a GPU node (or
# workstation) from the repository:
#
#   scripts/gpu-check.sh [--python PYTHON] [--keep] [--libraries LIST]
#
#   --libraries LIST  train only these RL libraries (comma-separated, from rl_games, rsl_rl,
#                     skrl_torch, skrl_jax; default: all four): to spend less device time when
#                     one library is in question. The others get the row `skip`; stop and resume
#                     are checks of their own and run whenever rsl_rl is installed.
#
# What it does, each a real hpctrain run on the local site (in a scratch runs directory):
#   gpus      what nvidia-smi lists, and whether the job's python (torch) can use CUDA
#   probe     a 1-rank job printing, at rank start, the device the bootstrap pinned and the
#             site's NCCL_* variables as the rank sees them
#   <library> every installed RL library (rl_games, rsl_rl, skrl torch, skrl jax; or those in
#             --libraries) for a few iterations (examples/rl/*), 1 rank per GPU
#   stop      SIGTERM to a training job mid-run: it must end STOPPED with a saved checkpoint
#   resume    `hpctrain submit --resume RUN` continues it from that checkpoint to the end
# and prints one table: check | result | detail. Where no CUDA is usable (no nvidia-smi, no GPU,
# or a torch without CUDA) everything runs on the CPU, and the table says so. Exit status 0 when
# every check passed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=$(command -v python3)
KEEP=0
ALL_LIBRARIES=rl_games,rsl_rl,skrl_torch,skrl_jax
LIBRARIES=$ALL_LIBRARIES
while (( $# )); do
  case $1 in
    --python) PYTHON=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --libraries) LIBRARIES=${2-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# The whole list must be names from ALL_LIBRARIES, comma-separated (no spaces, none empty).
NAME="(${ALL_LIBRARIES//,/|})"
LIST_RE="^$NAME(,$NAME)*\$"
if [[ ! $LIBRARIES =~ $LIST_RE ]]; then
  echo "gpu-check: --libraries '$LIBRARIES' is not a comma-separated list of names from:" \
       "${ALL_LIBRARIES//,/, } (see --help)" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-gpu-check.XXXXXX")
if (( ! KEEP )); then
  trap 'rm -rf "$WORK"' EXIT
fi
export HPCTRAIN_RUNS_DIR=$WORK/runs HPCTRAIN_HOME=$WORK/home  # not in your own run list
ROWS=()
FAILED=0
row() {  # CHECK RESULT DETAIL
  ROWS+=("$1|$2|$3")
  [[ $2 != FAIL ]] || FAILED=1
  printf 'gpu-check: %-10s %-5s %s\n' "$1" "$2" "$3" >&2
}
hpctrain() {
  (cd "$ROOT" && "$PYTHON" -m hpctrain "$@")
}
run_dir_of() {  # submit's output -> the run directory
  sed -n 's/^run directory: //p' <<<"$1" | head -n 1
}
state_of() {  # RUN -> STATE EXIT_CODE REASON (one line)
  hpctrain status "$1" --json 2>/dev/null | "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)["state"]
print(s["state"], s.get("exit_code"), s.get("reason") or "")'
}

# --- gpus: nvidia-smi, then torch -------------------------------------------------------------
GPUS=0
NAMES=""
if command -v nvidia-smi >/dev/null 2>&1 && SMI=$(nvidia-smi -L 2>&1); then
  # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"
  GPUS=$(grep -c '^GPU [0-9]*: ' <<<"$SMI") || GPUS=0
  NAMES=$(sed -n 's/^GPU [0-9]*: \(.*\) (UUID: .*$/\1/p' <<<"$SMI" | sort | uniq -c |
          sed 's/^ *\([0-9]*\) /\1x /' | paste -sd ',' -)
  SMI_SAYS="nvidia-smi lists $GPUS GPU(s): ${NAMES:-none}"
elif command -v nvidia-smi >/dev/null 2>&1; then
  SMI_SAYS="nvidia-smi fails: $(head -n 1 <<<"$SMI")"
else
  SMI_SAYS="no nvidia-smi"
fi
TORCH=$("$PYTHON" -c 'import torch; print(torch.__version__, int(torch.cuda.is_available() and torch.cuda.device_count()))' 2>/dev/null) || TORCH="none 0"
read -r TORCH_VERSION CUDA_COUNT <<<"$TORCH"
if (( GPUS > 0 && CUDA_COUNT > 0 )); then
  DEVICE=cuda
  NGPU=$(( GPUS < CUDA_COUNT ? GPUS : CUDA_COUNT ))
  row gpus ok "$SMI_SAYS; torch $TORCH_VERSION sees $CUDA_COUNT: the checks run on cuda"
else
  DEVICE=cpu
  NGPU=0
  why="torch $TORCH_VERSION cannot use CUDA"
  (( GPUS > 0 )) || why="no GPU"
  row gpus cpu "$SMI_SAYS; $why: the checks run on cpu"
fi
# A GPU job asks for its GPUs (one rank each); on the CPU, one rank.
RES=(--site local --set resources.nodes=1 --set "python=$PYTHON")
if [[ $DEVICE == cuda ]]; then
  RES+=(--set "resources.gpus_per_node=$NGPU")
else
  RES+=(--set resources.gpus_per_node=0 --set resources.procs_per_node=1)
fi

# --- probe: the pinned device and the NCCL variables at rank start -----------------------------
mkdir -p "$WORK/probe"
cat >"$WORK/probe/probe.py" <<'EOF'
import json, os
import torch
device = "cpu"
if torch.cuda.is_available():
    i = torch.cuda.current_device()
    device = f"cuda:{i} ({torch.cuda.get_device_name(i)})"
nccl = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
print("gpu-check probe: " + json.dumps({"rank": int(os.environ.get("RANK", 0)), "device": device,
      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "nccl": nccl}), flush=True)
EOF
cat >"$WORK/probe/job.yaml" <<EOF
name: gpu-check-probe
library: command
script: $WORK/probe/probe.py
snapshot: false
resources: {nodes: 1, time: "00:05:00"}
EOF
OUT=$(hpctrain submit "$WORK/probe/job.yaml" "${RES[@]}" --wait 2>&1)
RUN=$(run_dir_of "$OUT")
SAID=$(grep -h 'gpu-check probe: ' "$RUN"/logs/* 2>/dev/null | head -n 1 | sed 's/^.*gpu-check probe: //')
if [[ -n $SAID ]]; then
  DETAIL=$("$PYTHON" -c '
import json, sys
p = json.loads(sys.argv[1])
nccl = " ".join(f"{k}={v}" for k, v in p["nccl"].items()) or "none set"
rank, device, visible = p["rank"], p["device"], p["cuda_visible_devices"]
print(f"rank {rank} on {device}, CUDA_VISIBLE_DEVICES={visible}; NCCL: {nccl}")' "$SAID")
  RESULT=ok
  if [[ -z $DETAIL || ($DEVICE == cuda && $DETAIL != *" on cuda:"*) ]]; then RESULT=FAIL; fi
  row probe "$RESULT" "$DETAIL"
else
  row probe FAIL "no probe line: $(tail -n 3 <<<"$OUT" | paste -sd ' ' -)"
fi

# --- every installed RL library, a few iterations ----------------------------------------------
for lib in rl_games:rl_games rsl_rl:rsl_rl skrl:skrl_torch skrl,jax:skrl_jax; do
  modules=${lib%%:*} example=${lib#*:}
  if [[ ,$LIBRARIES, != *",$example,"* ]]; then
    row "$example" skip "not asked (--libraries)"
    continue
  fi
  if ! "$PYTHON" -c "import $modules" >/dev/null 2>&1; then
    row "$example" skip "not installed for $PYTHON"
    continue
  fi
  OUT=$(hpctrain submit "examples/rl/${example}_pendulum.yaml" "${RES[@]}" \
        --set 'args=[--updates,3,--num-envs,8,--steps,16]' --wait 2>&1)
  RUN=$(run_dir_of "$OUT")
  read -r STATE CODE REASON <<<"$(state_of "$RUN")"
  if [[ $STATE == COMPLETED ]]; then
    row "$example" ok "3 iterations on $DEVICE, COMPLETED"
  else
    row "$example" FAIL "${STATE:-no run} (exit ${CODE:-?}) $REASON: ${RUN:-$(tail -n 2 <<<"$OUT" | paste -sd ' ' -)}"
  fi
done

# --- a SIGTERM mid-training saves; --resume continues ------------------------------------------
if "$PYTHON" -c "import rsl_rl" >/dev/null 2>&1; then
  OUT=$(hpctrain submit examples/rl/rsl_rl_pendulum.yaml "${RES[@]}" \
        --set 'args=[--updates,10,--save-interval,1000,--sleep,0.3,--num-envs,8,--steps,16]' 2>&1)
  RUN=$(run_dir_of "$OUT")
  for (( i = 0; i < 600; i++ )); do  # until iteration 3 (at most 5 minutes)
    if grep -qs '"step": *\([3-9]\|[1-9][0-9]\)' "$RUN"/status/progress-*.json; then break; fi
    sleep 0.5
  done
  kill -TERM "$(cat "$RUN/status/pid" 2>/dev/null)" 2>/dev/null
  for (( i = 0; i < 600; i++ )); do
    read -r STATE CODE REASON <<<"$(state_of "$RUN")"
    [[ $STATE == RUNNING || $STATE == PENDING || -z $STATE ]] || break
    sleep 0.5
  done
  if [[ $STATE == STOPPED && $REASON == *"saved "* ]]; then
    row stop ok "SIGTERM to the job: $STATE $REASON"
    OUT=$(hpctrain submit --resume "$RUN" --wait 2>&1)
    read -r STATE CODE REASON <<<"$(state_of "$RUN")"
    FROM=$(grep -h 'resuming from' "$RUN"/logs/* 2>/dev/null | head -n 1 | sed 's/^.*resuming from \([^ ]*\).*$/\1/')
    if [[ $STATE == COMPLETED && -n $FROM ]]; then
      row resume ok "continued from ${FROM#"$RUN"/} to the end: COMPLETED"
    else
      row resume FAIL "${STATE:-?} (exit ${CODE:-?}) ${FROM:+from $FROM }$REASON"
    fi
  else
    row stop FAIL "SIGTERM to the job: ${STATE:-no run} (exit ${CODE:-?}) $REASON"
    row resume skip "nothing was saved to resume from"
  fi
else
  row stop skip "rsl_rl (the stop's training) is not installed"
  row resume skip "rsl_rl is not installed"
fi

# --- the table ----------------------------------------------------------------------------------
echo
printf '%-11s| %-7s| %s\n' check result detail
printf '%-11s+%-8s+%s\n' ----------- -------- ----------------------------------------------
for r in "${ROWS[@]}"; do
  IFS='|' read -r check result detail <<<"$r"
  printf '%-11s| %-7s| %s\n' "$check" "$result" "$detail"
done
echo "device: $DEVICE; runs in $HPCTRAIN_RUNS_DIR$( (( KEEP )) || echo ' (removed; --keep keeps them)')"
exit "$FAILED"
