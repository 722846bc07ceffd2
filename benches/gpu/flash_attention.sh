#!/usr/bin/env bash
# Timing of the CubeCL flash-attention kernels on a GPU, in one call: forward and forward plus
# backward at s = 1024 to 8192 on `[1, 8, s, 64]`, float32, for
#   attn/native            this workspace's kernels (Route::CubeOperation on a CubeCL device),
#   burn/module_attention  burn's attention (its autodiff differentiates the decomposed fallback),
#   attn/explicit          scores and weights as tensors,
#   torch/sdpa             PyTorch's CUDA scaled_dot_product_attention, where PyTorch is installed.
# Each case and length runs in its own process, so that one that runs out of device memory is
# recorded as such and the others still run.
#
# Build here, carry the binary, run there:
#   CARGO_TARGET_DIR=target/gpu cargo build --release -p attn-bench --features wgpu
#   bash benches/gpu/flash_attention.sh          # ATTN_BENCH=target/gpu/release/attn-bench
# Lines go to $OUT (or benches/results) as gpu-flash-<name>.jsonl, one JSON object per case.
set -uo pipefail
cd "$(dirname "$0")/../.."
bench="${ATTN_BENCH:-target/gpu/release/attn-bench}"
out="${OUT:-benches/results}"
sizes="${SIZES:-1024 2048 4096 8192}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

for case in attn/native burn/module_attention attn/explicit; do
  name="${case//\//-}"
  for s in $sizes; do
    if ! timeout 240 "$bench" --json --device wgpu --cases "$case" --sizes "$s" \
        >>"$out/gpu-flash-$name.jsonl" 2>>"$out/gpu-flash-$name.err"; then
      echo "{\"impl\": \"${case%%/*}\", \"case\": \"${case#*/}\", \"seq_len\": $s, \"error\": \"did not complete (exit or time limit); see gpu-flash-$name.err\"}" \
        >>"$out/gpu-flash-$name.jsonl"
    fi
  done
  cat "$out/gpu-flash-$name.jsonl"
done

if python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  python3 benches/peers/torch_sdpa.py --device cuda --cases sdpa --sizes "${sizes// /,}" \
    | tee "$out/gpu-flash-torch.jsonl"
else
  echo "no PyTorch with CUDA on this machine: the torch/sdpa peer was not run"
fi
