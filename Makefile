# The README's two commands: `make run` and `make test`. Everything else is a step of those.
BUILD ?= build
JOBS ?= $(shell nproc)
CACHE ?= $(HOME)/.cache/moeserve
DEMO_MODEL ?= $(CACHE)/models/demo-qwen3-moe-tiny
PROMPT ?= The capital of France is

.PHONY: setup configure build test run generate bench format clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_CACHE_DIR=$(CACHE) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@python3 tools/check_layering.py
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

run: build
	@bash scripts/run_demo.sh $(BUILD)/src/moeserve/cli/moeserve $(DEMO_MODEL)

generate: build
	@$(BUILD)/src/moeserve/cli/moeserve generate --model $(DEMO_MODEL) --prompt "$(PROMPT)" --max-tokens 32

bench: build
	@for b in $(BUILD)/benchmarks/*_bench; do $$b --benchmark_min_time=0.3; done

format:
	@find src tests benchmarks -name '*.h' -o -name '*.cpp' | xargs clang-format -i

clean:
	@rm -rf $(BUILD)
