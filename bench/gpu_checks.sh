#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one script for a lent GPU machine (no Jupyter there,
# its own python3 with torch): the CUDA tests, chapter 6's code and chapter 7's fast paths on
# the GPU, the recorded backend table, and bench_mha on the GPU. Results go to $OUT (default
# ./gpu-out); commit what they show (bench/GPU.md, chapters/data/sdpa_backends_<gpu>.json).
#   usage: OUT=dir bash bench/gpu_checks.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=.:tests PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PY:-python3}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"; } \
  2>&1 | tee "$OUT/machine.txt"
echo "== CUDA tests"
$PY -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda.py tests/test_sdpa_backends.py \
  tests/test_diversity.py 2>&1 | tee "$OUT/cuda-tests.txt" | tail -5
echo "== chapter 6 on the GPU, every cell"
( time $PY bench/run_cells.py chapters/06_kv.ipynb ) > "$OUT/chapter6-gpu.txt" 2>&1
tail -3 "$OUT/chapter6-gpu.txt"
echo "== chapter 7 on the GPU, from its fast paths on"
( time $PY bench/run_cells.py chapters/07_positions.ipynb --from-heading "Fast paths" ) \
  > "$OUT/chapter7-gpu.txt" 2>&1; tail -3 "$OUT/chapter7-gpu.txt"
echo "== recorded backend table"
$PY bench/record_sdpa_gpu.py --output "$OUT/sdpa_backends.json" > "$OUT/sdpa_backends.txt" 2>&1
tail -3 "$OUT/sdpa_backends.txt"
echo "== bench_mha on the GPU (float32 default rows, then bfloat16)"
$PY bench/bench_mha.py --device cuda --row-seconds 2 --output "$OUT/bench-mha-fp32.md" \
  > "$OUT/bench-mha-fp32.log" 2>&1; tail -2 "$OUT/bench-mha-fp32.log"
$PY bench/bench_mha.py --device cuda --dtype bfloat16 --lengths 512 1024 2048 4096 \
  --target-length 1024 --row-seconds 2 --output "$OUT/bench-mha-bf16.md" \
  > "$OUT/bench-mha-bf16.log" 2>&1; tail -2 "$OUT/bench-mha-bf16.log"
