#!/usr/bin/env bash
# Every phase a few steps on this machine's GPU: what each ran on and how fast, in a few minutes.
#
#   make gpu-check                       # or: scripts/gpu_check.sh [storage folder]
#   GPU_CHECK_DEVICE=cpu scripts/gpu_check.sh   # the same steps with no GPU flag (checks the script)
#
# Needs the CUDA build of torch (`make venv TORCH_INDEX=https://download.pytorch.org/whl/cu128`)
# and Stockfish. Each phase runs on the tiny preset at a few steps, asking for the GPU the way
# configs/gpu.yaml does; its lines that say where it ran (`worker 0: cuda...`) and its speed
# (tokens/s, samples/s, episodes) are printed, its whole log kept under <storage>/logs/.
set -euo pipefail
OUT=${1:-$(mktemp -d /tmp/gpu-check-XXXXXX)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)   # a relative folder is the caller's, not the repo's
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
LIMIT=${GPU_CHECK_PHASE_LIMIT:-600}         # seconds a phase may take before it counts as stuck
LOGS="$OUT/logs"
mkdir -p "$LOGS"
common=(--config tiny --run-name gpu-check --storage "$OUT" --no-tracking)

if [ "$DEVICE" = cuda ]; then
    "$PY" - <<'PY' || { echo "gpu-check: this torch sees no CUDA device; install the CUDA build (README, 'From a laptop to a GPU cluster')"; exit 2; }
import sys, torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)"
      + (f": {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
sys.exit(0 if torch.cuda.is_available() else 1)
PY
    gpu=(--use-gpu)
    # the learner takes a whole GPU; the inference actors share a second one when there is one
    if [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
        share=0.5; producer=cuda
    else
        share=0; producer=cpu; echo "gpu-check: one GPU: the learners use it, inference actors stay on the CPU"
    fi
else
    gpu=(--no-use-gpu); share=0; producer=cpu
fi

phase() {  # phase NAME ARGS...: run it, print where it ran and how fast, and its time
    local name=$1; shift
    local started=$SECONDS
    if ! timeout "$LIMIT" "$PY" -m "pipelines.$name" "${common[@]}" "$@" >"$LOGS/$name$TAG.log" 2>&1; then
        echo "gpu-check: $name$TAG failed or ran past ${LIMIT} s; its log: $LOGS/$name$TAG.log"
        tail -5 "$LOGS/$name$TAG.log"; exit 1
    fi
    local log="$LOGS/$name$TAG.log"
    {   # where it ran (the first worker's line), then how fast (a phase may print none of them)
        grep -am1 -E "worker 0(/[0-9]+)?: (cpu|cuda)" "$log" || true
        grep -aE "tokens/s|samples/s|episodes|positions/s|games/s|steps .* in |iterations" "$log" | tail -3 || true
    } | sed "s/^/  /"
    echo "== $name$TAG: $((SECONDS - started)) s"
}

TAG= phase prepare --generate 0 --max-games 800
TAG= phase sft "${gpu[@]}" --max-steps 60 --eval-every 60 --batch-size 16
TAG=-board phase sft "${gpu[@]}" --text-format board --max-steps 60 --eval-every 60
TAG= phase preferences --positions 64 --heldout-positions 16 --sampler-gpus "$share"
TAG= phase reward "${gpu[@]}" --max-steps 20 --eval-every 20 --spearman-positions 5
TAG= phase ppo "${gpu[@]}" --reward-server-gpus "$share" --iterations 3 --episodes-per-iteration 16 \
    --concurrent-games 16 --critic-warmup 1 --heldout-positions 20 --quality-nodes 0
TAG= phase grpo "${gpu[@]}" --iterations 5 --heldout-positions 20
TAG= phase dpo "${gpu[@]}" --max-steps 10 --eval-every 10 --heldout-positions 20
TAG= phase selfplay "${gpu[@]}" --producer-device "$producer" --iterations 1 --episodes 8 \
    --mcts-simulations 16 --gate-games 0 --eval-games 2
echo "gpu-check: every phase ran ($DEVICE); logs under $LOGS"
