#!/usr/bin/env bash
# One prepared run for a borrowed GPU machine (the `device` tool runs it in a copy of this
# working tree): check the kernels compiled for real, then the smoke and the full calibration
# sweep, each under a hard timeout, and leave everything worth keeping under $OUT.
#
#   run: bash scripts/device_calibration.sh h200        (timeout_s ~540)
#
# Needs torch with CUDA or ROCm, triton and this project's Python dependencies already on
# that machine (it reaches no registry); it installs the project itself with --no-deps. Probe
# first with a one-line `python3 -c "import torch, triton, pydantic, simpy, typer, pandas"`. Afterwards, on the development machine:
# copy $OUT/hardware_profiles/<NAME>/ into hardware_profiles/, run `calibrate fit NAME` and
# `calibrate report NAME`, commit the measurements and latency_models.json, and put the
# held-out error table into the README.
set -uo pipefail
NAME=${1:?usage: device_calibration.sh DEVICE_NAME}
OUT=${OUT:-out/device}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

python3 - <<'EOF' || { echo "no usable GPU torch here"; exit 2; }
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__,
      "cuda", torch.version.cuda, "hip", torch.version.hip)
assert torch.cuda.is_available(), "torch sees no GPU"
print(torch.cuda.device_count(), "x", torch.cuda.get_device_name(0))
EOF
python3 -m pip install --quiet --no-deps -e . || exit 2
nvidia-smi || rocm-smi || true

# The device tool allows 10 minutes a call, so the budgets here add up to ~9 (the full sweep
# resumes where a budget stopped it: a second call continues it).
# 1. the kernels, compiled for real, against their references
TRITON_INTERPRET=0 timeout 120 python3 -m pytest -q -p no:cacheprovider \
    tests/kernels_calibration -k "not fnuz" || echo "kernel tests FAILED (measuring anyway)"

# 2. smoke, then the full sweep (it skips what the smoke measured)
# into this tree's hardware_profiles/ (calibrate's default is the user data folder, which
# the copy below would not see)
DIR=hardware_profiles
timeout 100 calibrate measure --device-name "$NAME" --profiles-dir "$DIR" --smoke --budget-s 60 \
    || echo "smoke ended with $?"
timeout 320 calibrate measure --device-name "$NAME" --profiles-dir "$DIR" --budget-s 280 \
    || echo "full sweep ended with $?"

# 3. fit and report here too, so the numbers come back even if the copy is all we keep
calibrate fit "$NAME" --profiles-dir "$DIR" || true
calibrate report "$NAME" --profiles-dir "$DIR" --out "$OUT/calibration-$NAME.html" || true
mkdir -p "$OUT/hardware_profiles"
cp -r "hardware_profiles/$NAME" "$OUT/hardware_profiles/"
