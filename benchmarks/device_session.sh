#!/usr/bin/env bash
# One call on a lent CUDA machine, within BUDGET seconds (docs/neural.md, "The device check"):
#   1. the device check with its profile (GPU tests, CPU-vs-GPU rows; no whole LoRA run,
#      no CPU LoRA round), at most CHECK_PERCENT (40) % of the budget;
#   2. the paper-scale FedCT Fashion-MNIST run alone on the GPU, end to end, with its steps
#      replayed as CUDA graphs (long run 23); should it fail or not finish, the run without
#      them (long run 0) in what is left; at most 200 s in all;
#   3. the whole LoRA MiniLM FedCT run (T = 100; goal <= 3 minutes on an H100), in what is
#      left less 20 s (less 260 s more with WORKERS16), at most 240 s, where that is at
#      least 120 s (TEXT_RUN=0 leaves it out); it prints its rounds' progress, so a run
#      cut short still gives its pace;
#   4. with WORKERS16=N (N worker processes; the lent machines have 16 cores): the
#      simulator's workers against one process, FedCT with forests and FedAvg with the MLP
#      at 32 clients (issue 31's 16-core goal; WORKERS16_CASES overrides the cases), in
#      what is left less 20 s, at most 240 s, where that is at least 120 s, written to
#      workers16.json;
#   5. the long runs SELECT (positions in `device_check.py --long-runs`; `none`: no long
#      run), side by side, until 20 s before the budget ends.
# What comes back (the device tool returns at most 8 files from $OUT): check.log,
# profiles.tar.gz (the profile tables of the Fashion-MNIST round, of a call of 100 clients
# trained together and of the LoRA round), workers16.json with WORKERS16, and long.tar.gz
# (each run's log, result, per-round table and summary.json; checkpoints removed).
# Data: carry .devcache holding fashion_mnist/ and vader/ from ~/.cache/fedlabels (about 34 MiB).
#
#   bash benchmarks/device_session.sh 560 9,10,12,13,15,16
#   DRY_RUN=1 CHECK_PERCENT=50 bash benchmarks/device_session.sh 800 9  # CPU only, tiny:
#   checks the script, the check's rows all there (settings too) (tests/test_device_check.py)
#
# A part that overruns its limit gets SIGTERM, and SIGKILL KILL_AFTER (10) s later (timeout -k:
# a process deaf to SIGTERM, or stuck in a driver call, must not hold up the parts after it);
# what it printed stays in check.log, and the parts after it run in what is left.
set -u

# the limit in seconds of the text run or the workers' part with $1 seconds of the budget
# left: all but 20 s (the packing), at most 240 s; 0 (not run) under 120 s, too little
part_limit() {
    local limit=$(( $1 - 20 < 240 ? $1 - 20 : 240 ))
    echo $(( limit >= 120 ? limit : 0 ))
}
# sourced (tests/test_device_check.py): the functions above, nothing run
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0
budget=${1:-480}
kill_after=${KILL_AFTER:-10}
limited() { timeout -k "$kill_after" "$@"; }  # limited SECONDS COMMAND..: SIGTERM, then SIGKILL
select=${2:-9,10,11,12,13,14,15,16,17}
out=${OUT:-benchmarks/results/device_session}
mkdir -p "$out"
export PYTHONPATH="$PWD/src" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
export FEDLABELS_CACHE="${FEDLABELS_CACHE:-$PWD/.devcache}"
py=${PYTHON:-python3}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
long=$(mktemp -d)
prof=$(mktemp -d)
trap 'rm -rf "$long" "$prof"' EXIT  # packed into $out by then

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$out/check.log"
dry=()
if [ -n "${DRY_RUN:-}" ]; then dry=(--dry-run --skip-tests); fi
# CHECK_PERCENT: the check's share of the budget; CHECK_FLAGS: more of its flags (e.g.
# --skip-gather, measured on the H200 already)
limited $((budget * ${CHECK_PERCENT:-40} / 100)) "$py" benchmarks/device_check.py \
    --skip-text-run --skip-cpu-text --skip-offload --profile "$prof" ${CHECK_FLAGS:-} \
    "${dry[@]}" 2>&1 | tee -a "$out/check.log"
tar czf "$out/profiles.tar.gz" -C "$prof" .
echo "check ended after $((SECONDS - start)) s" | tee -a "$out/check.log"

e2e=$(( $(left) - 40 < 200 ? $(left) - 40 : 200 ))
if [ "$e2e" -gt 30 ]; then
    t0=$SECONDS
    # end to end as a user runs it: its paced checkpoints (--keep-checkpoints; the
    # files are left out of what comes back)
    limited $((e2e + 15)) "$py" benchmarks/device_check.py --execute-long "$e2e" \
        --parallel 1 --keep-checkpoints --select 23 --out-dir "$long/e2e" 2>&1 | tee -a "$out/check.log"
    rest=$(( e2e - (SECONDS - t0) ))
    if ! grep -q '"status": "done"' "$long/e2e/summary.json" 2>/dev/null && [ "$rest" -gt 30 ]; then
        # the graphs failed or ran out of time: the run without them (the check's rows
        # compare a round with and without)
        limited $((rest + 15)) "$py" benchmarks/device_check.py --execute-long "$rest" \
            --parallel 1 --keep-checkpoints --select 0 --out-dir "$long/e2e-eager" 2>&1 \
            | tee -a "$out/check.log"
    fi
fi

# with WORKERS16 the text run leaves the workers' part its 260 s
reserve=0
if [ -n "${WORKERS16:-}" ]; then reserve=260; fi
text=$(part_limit $(( $(left) - reserve )))
if [ "${TEXT_RUN:-1}" != 0 ] && [ "$text" -gt 0 ]; then
    limited "$text" "$py" benchmarks/device_check.py --text-run-only "${dry[@]}" 2>&1 \
        | tee -a "$out/check.log"
fi

workers=$(part_limit "$(left)")
if [ -n "${WORKERS16:-}" ] && [ "$workers" -gt 0 ]; then
    limited "$workers" "$py" benchmarks/workers_speedup.py --workers "$WORKERS16" --repeats 1 \
        --cases "${WORKERS16_CASES:-fedct-rf-32,fedavg-mlp-32}" --probe '' \
        --output "$out/workers16.json" 2>&1 | tee -a "$out/check.log"
fi

rest=$(( $(left) - 20 ))
if [ "$rest" -gt 30 ] && [ "$select" != none ]; then
    n=$(echo "$select" | tr ',' '\n' | wc -l)
    limited $((rest + 10)) "$py" benchmarks/device_check.py --execute-long "$rest" \
        --parallel "$n" --select "$select" --out-dir "$long/runs" 2>&1 | tee -a "$out/check.log"
fi
# at most 16 MiB a file comes back: checkpoints and their journals, their temporary files
# and anything over 4 MB (a run stopped before its checkpoint was removed) are left out, and
# named
find "$long" -type f \( -name '*.checkpoint.npz' -o -name '*.checkpoint.journal' \
    -o -name '*.tmp' -o -size +4M \) \
    -printf 'left out of long.tar.gz: %P (%s bytes)\n' -delete | tee -a "$out/check.log"
tar czf "$out/long.tar.gz" -C "$long" .
echo "all ended after $((SECONDS - start)) s" | tee -a "$out/check.log"
