# Sourced by the session scripts bench/gpu_YYYY_MM_DD*.sh (device calls): the environment every call sets, the output
# folder $O ($OUT on the device machine, else /tmp/<script name>) with the machine in $O/device.txt, t0 for the
# elapsed-time lines, pack (the folder as $O/call.tgz: the device tool returns few files) and tests (pytest's GPU
# tests of FILES on 15 workers within LIMIT seconds, the summary lines into $O/tests.log).
set -uf  # (no globbing: pytest node ids hold [brackets])
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/$(basename "$0" .sh)}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$O/device.txt"
t0=$SECONDS
pack() { (cd "$O" && tar czf /tmp/call.tgz --exclude call.tgz . && mv /tmp/call.tgz call.tgz); }
tests() {  # tests LIMIT FILES...
  local limit=$1; shift
  timeout "$limit" python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" "$@" 2>&1 \
    | grep -E "passed|failed|^E  |^FAILED|Timeout" | head -30 | tee -a "$O/tests.log"
  echo "tests done at $((SECONDS - t0)) s"
}
