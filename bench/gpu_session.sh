#!/usr/bin/env bash
# One lent GPU machine, one call (issue 24): what the machine has, the GPU tests, and
# bench/gpu.py with outputs checked against onnxruntime. Everything lands under $OUT.
#
# From the repository root, with the third-party models copied into .device/models
# (cp -r ~/.cache/sglens-test-models .device/models; .device/ is git-ignored) and carried
# with sample_models/:   bash bench/gpu_session.sh [seconds for the benchmark]
# (MODELS="a b" for a subset, RUNS=n timed runs each, PROFILE=1 for cProfile dumps, REAL_GPU_SUITE=0 to skip
# the executor tests on the real GPU)
set -u
OUT=${OUT:-/tmp/gpu_session}; mkdir -p "$OUT"
BENCH_S=${1:-220}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PY=python3
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

{ nvidia-smi -L; uname -r
  $PY -c "import sys, numpy, cupy, onnx, onnxruntime, torch; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'onnx', onnx.__version__, 'ort', onnxruntime.__version__, 'torch', torch.__version__)"
  $PY -c "from cupy.cuda import cudnn; print('cudnn', cudnn.getVersion())" 2>&1 | tail -1
  $PY -c "import cupy; print('cublas', cupy.cuda.cublas.getVersion(cupy.cuda.device.get_cublas_handle()))" 2>&1 | tail -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

mkdir -p ~/.cache && rm -rf ~/.cache/sglens-test-models && cp -r .device/models ~/.cache/sglens-test-models
export SGLENS_BENCH_MODELS=/tmp/sglens-bench-models
# the engine benchmark's torch exports, made here (not carried: hundreds of MB), in the background
ORDER=${MODELS:-"ppocr_det* ppocr_rec* ppocr_cls* silero_vad* silero_vad_16k_op15 silero_vad_16k_sequence silero_vad_half
 silero_vad_op18_ifless silero_vad_openvino_16k magika* bert_mini distilbert gpt2_small t5_small whisper_tiny_encoder
 vit_tiny mobilenet_v2 convnext_tiny resnet18* resnet50 wav2vec2_small gru_bidir lstm_bidir"}
EXPORTS=$($PY -c "import sys; sys.path[:0]=['bench','.']; import torch_models; print(' '.join(n for n in torch_models.EXPORTS if n in sys.argv[1].replace('*', '').split()))" "$ORDER")
( echo $EXPORTS | tr ' ' '\n' | OMP_NUM_THREADS=2 xargs -P 7 -I{} timeout 200 $PY -c \
    "import sys; sys.path[:0]=['bench','.']; import torch_models; print('{}', torch_models.export('{}')[0])" \
    > "$OUT/exports.log" 2>&1 ) &
say "C extension"
$PY setup.py build_ext --inplace -q > "$OUT/build.log" 2>&1; tail -2 "$OUT/build.log"
$PY -c "from engine.kernels import native; print('native kernels:', native.available() if hasattr(native, 'available') else native)" 2>&1 | tail -1
say "exports so far: $(ls $SGLENS_BENCH_MODELS/*.onnx 2>/dev/null | wc -l) (the wheel models run first)"
say "GPU tests"
timeout 90 $PY -m pytest -q -p no:cacheprovider -rfE tests/test_executor_gpu.py tests/test_engine_gpu.py \
  > "$OUT/tests_gpu.txt" 2>&1
rc=$?; tail -15 "$OUT/tests_gpu.txt"
GRAPHS=""
if [ $rc -ge 128 ]; then GRAPHS="--no-graphs"; say "the GPU tests crashed (rc $rc): the benchmark runs without CUDA graphs"; fi
# the exports (CPU timings taken beside 7 export processes were up to 6x slow: ppocr_det), at most a minute
for _ in $(seq 60); do jobs -r | grep -q . || break; sleep 1; done
say "exports done: $(ls $SGLENS_BENCH_MODELS/*.onnx 2>/dev/null | wc -l) models; bench/gpu.py"
timeout "$BENCH_S" $PY bench/gpu.py --runs ${RUNS:-10} --by-op $GRAPHS ${PROFILE:+--profile "$OUT/profile.txt"} $ORDER 2>&1 | tee "$OUT/bench.txt"
[ "${REAL_GPU_SUITE:-1}" = 0 ] && { say "done"; exit 0; }
say "the executor tests with every Executor on the real GPU"
PYTHONPATH=tests timeout ${SUITE_S:-100} $PY -m pytest -q -p no:cacheprovider -p fake_cupy --real-gpu -n 8 -rfE \
  tests/test_executor_models.py tests/test_executor_outputs.py tests/test_subgraph_ops.py tests/test_rnn_paths.py \
  tests/test_fuse_gelu.py tests/test_fuse_attention.py tests/test_lean_body.py tests/test_memo.py \
  tests/test_fuse_hard_swish.py tests/test_compare.py 2>&1 | tail -40 > "$OUT/tests_real_gpu.txt"
tail -8 "$OUT/tests_real_gpu.txt"
say "done"
