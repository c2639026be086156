# Tensormorph: convenience targets over CMake. `make demo` and `make test` install what is
# missing (Debian packages, scripts/setup.sh) first.
BUILD   ?= build
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
BIN      = $(BUILD)/tensormorph
FUZZ_SECONDS ?= 30

.PHONY: all setup setup-test build demo test test-release test-asan fuzz bench clean

all: build

setup:
	@bash scripts/setup.sh

setup-test:
	@bash scripts/setup.sh --test

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The main job on the built-in default checkpoint: write it, inspect it, quantize it to int8
# per-channel (compressed-tensors) and show the Quantization Diff.
demo: build
	rm -rf out/demo-model out/demo-int8
	mkdir -p out
	$(BIN) demo -o out/demo-model
	$(BIN) inspect out/demo-model --no-tensors
	$(BIN) quantize out/demo-model -o out/demo-int8
	$(BIN) inspect out/demo-int8 --filter 'layers\.2\.mlp'
	$(BIN) scalar out/demo-int8 model.layers.2.mlp.down_proj.weight 0,7 --ref out/demo-model

# Every test: a release build and an ASan+UBSan build run the whole suite, then each fuzz
# target runs for FUZZ_SECONDS (clang + libFuzzer).
test: setup-test
	bash scripts/test.sh

test-release: setup-test
	bash scripts/test.sh release

test-asan: setup-test
	bash scripts/test.sh asan

fuzz: setup-test
	bash scripts/test.sh fuzz

bench: build
	bash bench/run.sh

clean:
	rm -rf build build-* out
