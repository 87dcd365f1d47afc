#!/bin/bash
# gpu-check.sh: does hpctrain train on this machine's GPU, end to end? Run it on a GPU node (or
# workstation) from the repository:
#
#   scripts/gpu-check.sh [--python PYTHON] [--keep] [--libraries LIST] [--evidence DIR]
#
#   --libraries LIST  train only these RL libraries (comma-separated, from rl_games, rsl_rl,
#                     skrl_torch, skrl_jax; default: all four): to spend less device time when
#                     one library is in question. The others get the row `skip`; stop and resume
#                     are checks of their own and run whenever rsl_rl is installed.
#   --evidence DIR    also copy what the checks judged into DIR (made if missing): health.json
#                     (the gate's verdict), report.txt (the training's report), pbt.txt and
#                     pbt.json (the population's status and report), stops.txt (what each stop
#                     and refusal said): for a machine whose runs directory does not outlive it.
#
# What it does, each a real hpctrain run on the local site (in a scratch runs directory):
#   gpus      what nvidia-smi lists, and whether the job's python (torch) can use CUDA
#   render    whether those GPUs can render (RT cores: yes, no, unknown), from the table a job's
#             video: is routed by (hpctrain/rank/before/gpu_models.py); no and unknown are not
#             failures: video jobs go to other GPUs
#   probe     a 1-rank job printing, at rank start, the device the bootstrap pinned and the
#             site's NCCL_* variables as the rank sees them
#   health    that probe job's health gate (rank/before/health.py) read the real nvidia-smi:
#             it passed, names the GPUs nvidia-smi -L lists and the driver, and its CUDA
#             probe ran
#   foreign   a GPU held by another process (a few GiB): the gate stops the job before its
#             ranks start, naming the GPU and the memory in use
#   <library> every installed RL library (rl_games, rsl_rl, skrl torch, skrl jax; or those in
#             --libraries) for a few iterations (examples/rl/*), 1 rank per GPU
#   stop      SIGTERM to a training job mid-run: it must end STOPPED with a saved checkpoint
#   resume    `hpctrain submit --resume RUN` continues it from that checkpoint to the end
#   report    a short torch training, sampled every 0.5 s: `hpctrain report` gives its GPU-hours
#             and each GPU's utilization (above 0) and memory from the real nvidia-smi stream
#   idle      a job that holds the GPU and does nothing: the idle-GPU stop (idle_gpus, 5 s
#             below 5 %) ends it STOPPED for idle GPUs
#   pbt       population-based training of rsl_rl (examples/rl/rsl_rl_pendulum_pbt.yaml, 12
#             iterations): 2 members at once, which on one GPU share it (the local site runs
#             each member's rank on cuda:0), ending with a best member
# and prints one table: check | result | detail. Where no CUDA is usable (no nvidia-smi, no GPU,
# or a torch without CUDA) everything runs on the CPU, and the table says so; the checks that
# need a GPU (health, foreign, idle, pbt) are then `cpu` rows (their logic is tested against a
# stand-in nvidia-smi: tests/local/test_health_local.py, test_report_local.py). Exit status 0
# when every check passed.
#
# Not here: `hpctrain doctor`, which checks two nodes (this machine is one: the local site
# refuses it; tests/slurm runs it on the local Slurm cluster), and the node barrier's driver
# comparison across nodes (health.same_driver), for the same reason.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=$(command -v python3)
KEEP=0
EVIDENCE=""
ALL_LIBRARIES=rl_games,rsl_rl,skrl_torch,skrl_jax
LIBRARIES=$ALL_LIBRARIES
while (( $# )); do
  case $1 in
    --python) PYTHON=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --libraries) LIBRARIES=${2-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    --evidence) EVIDENCE=${2-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
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
if [[ -n $EVIDENCE ]] && ! mkdir -p "$EVIDENCE"; then
  echo "gpu-check: --evidence '$EVIDENCE': cannot make that folder" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-gpu-check.XXXXXX")
if (( ! KEEP )); then
  trap 'rm -rf "$WORK"' EXIT
fi
export HPCTRAIN_RUNS_DIR=$WORK/runs HPCTRAIN_HOME=$WORK/home  # not in your own run list
ROWS=()
FAILED=0
LAST=$SECONDS
row() {  # CHECK RESULT DETAIL (on stderr also the seconds since the last row)
  ROWS+=("$1|$2|$3")
  [[ $2 != FAIL ]] || FAILED=1
  printf 'gpu-check: %-10s %-5s %4ds  %s\n' "$1" "$2" $(( SECONDS - LAST )) "$3" >&2
  LAST=$SECONDS
}
hpctrain() {
  (cd "$ROOT" && "$PYTHON" -m hpctrain "$@")
}
run_dir_of() {  # submit's output -> the run directory
  sed -n 's/^run directory: //p' <<<"$1" | head -n 1
}
keep() {  # NAME: stdin, appended to the evidence file NAME (with --evidence)
  if [[ -n $EVIDENCE ]]; then cat >>"$EVIDENCE/$1"; else cat >/dev/null; fi
}
wait_end() {  # RUN SECONDS -> STATE EXIT_CODE REASON once it left PENDING/RUNNING (or the time is up)
  local state code reason i
  for (( i = 0; i < $2 * 2; i++ )); do
    read -r state code reason <<<"$(state_of "$1")"
    [[ $state == RUNNING || $state == PENDING || -z $state ]] || break
    sleep 0.5
  done
  echo "$state $code $reason"
}
state_of() {  # RUN -> STATE EXIT_CODE REASON (one line)
  hpctrain status "$1" --json 2>/dev/null | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
s = d["state"] if "state" in d else d["run"]["state"]  # a study or population: {"run": ..., ...}
print(s["state"], s.get("exit_code"), s.get("reason") or "")' 2>/dev/null
}

# The judges of the checks that read hpctrain's JSON: each prints one line, RESULT DETAIL.
cat >"$WORK/judge.py" <<'EOF'
import glob, json, os, sys


def num(v, fmt=".1f"):
    return "-" if v is None else format(v, fmt)


def health(run, ngpu, listed):
    """The probe job's gate: passed, with the GPUs nvidia-smi -L lists, its CUDA probe run."""
    path = glob.glob(os.path.join(run, "status", "health", "*.json"))[0]
    v = json.load(open(path))
    probe = json.load(open(os.path.join(run, "bootstrap.json")))["health"].get("cuda")
    counts = {}
    for g in v["gpus"]:
        counts[g["name"]] = counts.get(g["name"], 0) + 1
    same = sorted(f"{n}x {name}" for name, n in counts.items()) == sorted(listed.split(","))
    said = [p["message"] for p in v["problems"]] + v["notes"]
    good = v["ok"] and len(v["gpus"]) == int(ngpu) and same and probe and not said
    gpus = ", ".join(f"GPU {g['index']} {g['name']} ({g['uuid']}, {g['bus']})" for g in v["gpus"])
    return good, (f"{'passed' if v['ok'] else 'failed'}: {gpus or 'no GPU'}; driver {v['driver']}; "
                  + ("; ".join(said) or ("CUDA probe passed" if probe else "no CUDA probe"))
                  + f"; {v['seconds']} s" + ("" if same else f" (nvidia-smi -L lists {listed})"))


def report(path, device):
    """`hpctrain report --json` of a finished training: GPU-hours, each GPU sampled, busy."""
    r = json.load(open(path))
    errors = "; sampler errors: " + "; ".join(r["errors"]) if r["errors"] else ""
    hours = (f"GPU-hours {r['gpu_hours_allocated']:.5f} allocated ({r['allocation_source']}), "
             f"{num(r['gpu_hours_used'], '.5f')} used")
    gpus = "; ".join(f"GPU {g['index']} ({g['uuid']}): {g['samples']} samples, mean "
                     f"{num(g['mean_util'])}% (p10 {num(g['p10_util'], '.0f')}%), memory peak "
                     f"{num(g['mem_peak_mib'], '.0f')}/{num(g['mem_total_mib'], '.0f')} MiB, "
                     f"{num(g['mean_power_w'], '.0f')} W" for g in r["gpus"])
    if device != "cuda":  # the ranks read from /proc; an nvidia-smi that fails is only said
        good = r["cpu_source"] == "samples" and (r["cpu_efficiency"] or 0) > 0
        return "cpu" if good else False, (
            f"no GPU samples ({hours}); CPU efficiency {num(100 * (r['cpu_efficiency'] or 0))}% "
            f"({r['cpu_source']}), MaxRSS {num(r['max_rss_mib'], '.0f')} MiB{errors}")
    good = (r["gpus"] and r["gpu_hours_allocated"] > 0 and (r["gpu_hours_used"] or 0) > 0
            and not errors and all(g["samples"] and (g["mean_util"] or 0) > 0
                                   and (g["mem_peak_mib"] or 0) > 0 for g in r["gpus"]))
    return good, f"{hours}; {gpus or 'no GPU sampled'}{errors}"


def pbt(path):
    """`hpctrain status --json` of a population on the GPU: it completed, every member ended,
    one is best, and each member's launches sampled the GPU and its rank did not run in CPU
    mode."""
    st = json.load(open(path))
    state, pop = st["run"]["state"]["state"], st.get("population") or {}
    members, best = pop.get("members") or [], pop.get("best")
    good = (state == "COMPLETED" and len(members) == 2 and best is not None
            and all(m["state"] == "ended" for m in members))
    run, used = st["run"]["path"], []
    for m in members:
        trial = os.path.join(run, "trials", f"{m['member']:04d}")
        sampled = {row[0] for f in glob.glob(os.path.join(trial, "usage", "*.jsonl"))
                   for line in open(f) for row in json.loads(line).get("g", [])}
        cpu = any("hpctrain: CPU mode" in open(f, errors="replace").read()
                  for f in glob.glob(os.path.join(trial, "logs", "rank-*.log")))
        used.append(f"member {m['member']} sampled GPU {','.join(map(str, sorted(sampled))) or 'none'}"
                    + (" but ran in CPU mode" if cpu else ""))
        good = good and sampled and not cpu
    where = "on cuda (" + ", ".join(used) + ")"
    b = (f"best: member {best['member']}, {pop['metric']} {best['score']:.4g} at step {best['step']}"
         if best else "no best member")
    # a member's launch that the health gate refused (each one sees the other's memory on one GPU)
    refused = [open(f, errors="replace").read(400) for f in
               glob.glob(os.path.join(st["run"]["path"], "trials", "*", "status", "preflight-failed-*.txt"))]
    b += "".join(f"; refused: {r}" for r in refused[:2])
    ends = ", ".join(f"member {m['member']} {m['state']} at step {m['step']}" for m in members)
    copies = pop.get("copies", 0)
    return good, (f"{state}, {len(members)} members {where}; {copies} cop{'y' if copies == 1 else 'ies'}; "
                  f"{b}; {ends}")


try:
    good, detail = {"health": health, "report": report, "pbt": pbt}[sys.argv[1]](*sys.argv[2:])
    result = good if isinstance(good, str) else "ok" if good else "FAIL"
except Exception as exc:  # what the check left is not what it should be: say so in the row
    result, detail = "FAIL", f"cannot judge: {type(exc).__name__}: {exc}"
print(result, " ".join(detail.split()))
EOF
judge() {  # CHECK ARGS... -> RESULT DETAIL (one line)
  "$PYTHON" "$WORK/judge.py" "$@" 2>&1 | tail -n 1
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

# --- render: can these GPUs render (RT cores)? the table a video job is routed by -------------
# hpctrain/rank/before/gpu_models.py, the same table `validate` and `submit` read: a job with
# video: runs only where every GPU renders.
if [[ -n $NAMES ]]; then
  mapfile -t LISTED < <(sed -n 's/^GPU [0-9]*: \(.*\) (UUID: .*$/\1/p' <<<"$SMI" | sort -u)
  SAID=$(cd "$ROOT" && "$PYTHON" -m hpctrain.rank.before.gpu_models "${LISTED[@]}" 2>&1)
  case $(tail -n 1 <<<"$SAID") in
    renders) RESULT=yes ;;
    "cannot render") RESULT=no ;;
    unknown) RESULT=unknown ;;
    *) RESULT=FAIL ;;
  esac
  row render "$RESULT" "$(sed '$d' <<<"$SAID" | paste -sd ';' - | sed 's/;/; /g')"
else
  row render skip "no GPU listed by nvidia-smi: nothing to render with"
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
PROBE_RUN=$RUN
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

# --- health: the probe job's health gate, as it read the real nvidia-smi ------------------------
# A job that asks for GPUs passes the gate before its ranks start (status/health/NODE.json).
if [[ $DEVICE == cuda ]]; then
  VERDICT=$(find "$PROBE_RUN/status/health" -maxdepth 1 -name '*.json' -type f 2>/dev/null | head -n 1)
  if [[ -n $VERDICT ]]; then
    keep health.json <"$VERDICT"
    read -r RESULT DETAIL < <(judge health "$PROBE_RUN" "$NGPU" "$NAMES")
    row health "$RESULT" "$DETAIL"
  else
    row health FAIL "no verdict in $PROBE_RUN/status/health: the gate did not run"
  fi
else
  row health cpu "a job on cpu asks for no GPU: no health gate to read"
fi

# --- foreign: a GPU another process holds stops the job before its ranks start ----------------
if [[ $DEVICE == cuda ]]; then
  # 3 GiB on cuda:0, far above health.foreign_memory_mib (1024), held until killed.
  "$PYTHON" -c '
import sys, time, torch
x = torch.empty(3 << 30, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
time.sleep(600)' "$WORK/held" >"$WORK/holder.log" 2>&1 &
  HOLDER=$!
  for (( i = 0; i < 240; i++ )); do  # until it holds them (at most 2 minutes), or it died
    if [[ -e $WORK/held ]] || ! kill -0 "$HOLDER" 2>/dev/null; then break; fi
    sleep 0.5
  done
  if [[ -e $WORK/held ]]; then
    OUT=$(hpctrain submit "$WORK/probe/job.yaml" "${RES[@]}" --wait 2>&1)
    RUN=$(run_dir_of "$OUT")
    read -r STATE CODE REASON <<<"$(state_of "$RUN")"
    SAID=$(cat "$RUN"/status/preflight-failed-*.txt 2>/dev/null | head -c 2000 | tr '\n' ' ')
    { echo "== foreign: $STATE (exit $CODE) $REASON"; echo "$SAID"; } | keep stops.txt
    if [[ $STATE == FAILED && $SAID == *"failed the health gate: GPU 0 ("*"MiB in use before the job's ranks started"* ]] &&
       ! grep -qs 'gpu-check probe: ' "$RUN"/logs/*; then
      row foreign ok "$STATE before the ranks started: ${SAID%% (another process*}"
    else
      row foreign FAIL "${STATE:-no run} (exit ${CODE:-?}) $REASON: ${SAID:-no gate failure recorded}"
    fi
  else
    row foreign FAIL "the process meant to hold 3 GiB of GPU 0 did not: $(tail -n 1 "$WORK/holder.log")"
  fi
  kill "$HOLDER" 2>/dev/null
  wait "$HOLDER" 2>/dev/null
  for (( i = 0; i < 60; i++ )); do  # until the driver gave its memory back: the next jobs' gates
    USED=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | sort -n | tail -n 1)
    if [[ ! $USED =~ ^[0-9]+$ ]] || (( USED < 1024 )); then break; fi
    sleep 0.5
  done
else
  row foreign cpu "no GPU to hold"
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
  read -r STATE CODE REASON <<<"$(wait_end "$RUN" 300)"
  echo "== stop: $STATE (exit $CODE) $REASON" | keep stops.txt
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

# --- report: a short torch training, sampled; `hpctrain report` of it ---------------------------
mkdir -p "$WORK/train"
cat >"$WORK/train/train.py" <<'EOF'
import sys, time
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"  # cuda: the device the bootstrap pinned
width, batch = (4096, 8192) if device == "cuda" else (128, 256)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, 1)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=device)
y = x.pow(2).mean(1, keepdim=True)
steps, end = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps, last = steps + 1, loss.item()  # .item() waits for the GPU: the clock counts its work
print(f"gpu-check train: {steps} steps on {device}, loss {last:.4g}", flush=True)
EOF
TRAIN_SECONDS=8  # long enough for a dozen utilization samples; on the CPU there are none to take
[[ $DEVICE == cuda ]] || TRAIN_SECONDS=2
cat >"$WORK/train/job.yaml" <<EOF
name: gpu-check-train
library: command
script: $WORK/train/train.py
args: ["$TRAIN_SECONDS"]
snapshot: false
sample_every: 0.5
resources: {nodes: 1, time: "00:05:00"}
EOF
OUT=$(hpctrain submit "$WORK/train/job.yaml" "${RES[@]}" --wait 2>&1)
RUN=$(run_dir_of "$OUT")
read -r STATE CODE REASON <<<"$(state_of "$RUN")"
TRAINED=$(grep -h 'gpu-check train: ' "$RUN"/logs/rank-*.log 2>/dev/null | head -n 1 | sed 's/^.*gpu-check train: //')
if [[ $STATE == COMPLETED ]] && hpctrain report "$RUN" --json --out "$WORK/train" >"$WORK/report.json" 2>&1; then
  read -r RESULT DETAIL < <(judge report "$WORK/report.json" "$DEVICE")
  [[ $TRAINED == *" on $DEVICE,"* ]] || RESULT=FAIL
  row report "$RESULT" "${TRAINED:-no training line}; $DETAIL"
  hpctrain report "$RUN" --out "$WORK/train" 2>&1 | keep report.txt
else
  SAID=$(tail -n 2 "$WORK/report.json" 2>/dev/null || tail -n 2 <<<"$OUT")
  row report FAIL "${STATE:-no run} (exit ${CODE:-?}) $REASON: $(paste -sd ' ' - <<<"$SAID")"
fi

# --- idle: a job holding the GPU and doing nothing is stopped for idle GPUs -----------------------
if [[ $DEVICE == cuda ]]; then
  mkdir -p "$WORK/idle"
  cat >"$WORK/idle/idle.py" <<'EOF'
import time
import torch
x = torch.ones(1, device="cuda")  # a CUDA context on the GPU, and no work for it
print("gpu-check idle: holding the GPU, doing nothing", flush=True)
time.sleep(600)
EOF
  cat >"$WORK/idle/job.yaml" <<EOF
name: gpu-check-idle
library: command
script: $WORK/idle/idle.py
snapshot: false
sample_every: 0.5
idle_gpus: {below: 5, for: 5}
resources: {nodes: 1, time: "00:05:00"}
EOF
  OUT=$(hpctrain submit "$WORK/idle/job.yaml" "${RES[@]}" 2>&1)
  RUN=$(run_dir_of "$OUT")
  read -r STATE CODE REASON <<<"$(wait_end "$RUN" 120)"
  { echo "== idle: $STATE (exit $CODE) $REASON"; cat "$RUN/status/idle-stop.json" 2>/dev/null; echo; } | keep stops.txt
  if [[ $STATE == STOPPED && $REASON == *"idle GPUs"* ]]; then
    row idle ok "$STATE ${REASON%%; continue with*}"
  else
    [[ $STATE != RUNNING && $STATE != PENDING ]] || hpctrain cancel "$RUN" >/dev/null 2>&1
    row idle FAIL "${STATE:-no run} (exit ${CODE:-?}) $REASON: not stopped for idle GPUs within 120 s"
  fi
else
  row idle cpu "no GPU samples: the idle stop judges GPUs only"
fi

# --- pbt: a population of rsl_rl members, at once --------------------------------------------------
if [[ $DEVICE != cuda ]]; then
  # On the CPU a population is what hpctrain's own tests train (tests/local/test_pbt_*.py);
  # what is in question here is members sharing a GPU.
  row pbt cpu "members sharing a GPU need one: on the CPU, see tests/local/test_pbt_library_local.py"
elif "$PYTHON" -c "import rsl_rl" >/dev/null 2>&1; then
  # 12 iterations, a decision every 4; --sleep lets a member's reports be seen before it ends.
  # One GPU per member: the local site gives each member's rank cuda:0, so on one GPU the two
  # members share it (and each one's health gate sees the other's memory, under 1 GiB here).
  PBT=(--set search.pbt.steps=12 --set resources.gpus_per_node=1
       --set 'args=[--updates,12,--save-interval,2,--num-envs,8,--steps,50,--sleep,0.2,--entropy-coef=0.01]')
  OUT=$(hpctrain submit examples/rl/rsl_rl_pendulum_pbt.yaml "${RES[@]}" "${PBT[@]}" 2>&1)
  RUN=$(run_dir_of "$OUT")
  read -r STATE CODE REASON <<<"$(wait_end "$RUN" 300)"
  [[ $STATE != RUNNING && $STATE != PENDING ]] || hpctrain cancel "$RUN" >/dev/null 2>&1
  if hpctrain status "$RUN" --json >"$WORK/pbt.json" 2>&1; then
    keep pbt.json <"$WORK/pbt.json"
    read -r RESULT DETAIL < <(judge pbt "$WORK/pbt.json")
    row pbt "$RESULT" "$DETAIL"
    { hpctrain status "$RUN"; hpctrain report "$RUN"; } 2>&1 | keep pbt.txt
  else
    row pbt FAIL "${STATE:-no run} (exit ${CODE:-?}) $REASON: $(tail -n 2 <<<"$OUT" | paste -sd ' ' -)"
  fi
else
  row pbt skip "rsl_rl (the members' training) is not installed"
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
