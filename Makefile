# The README's two commands: `make run` and `make test`. Everything else is a step of those.
BUILD ?= build
JOBS ?= $(shell nproc)
CACHE ?= $(HOME)/.cache/moeserve
DEMO_MODEL ?= $(CACHE)/models/demo-qwen3-moe-tiny
PROMPT ?= The capital of France is

.PHONY: setup configure build test run bench format clean

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
	@$(BUILD)/moeserve make-model --arch qwen3_moe --size tiny --seed 1 --out $(DEMO_MODEL)
	@$(BUILD)/moeserve generate --model $(DEMO_MODEL) --prompt "$(PROMPT)" --max-tokens 32

bench: build
	@for b in $(BUILD)/benchmarks/*_bench; do $$b; done

format:
	@find src tests benchmarks -name '*.h' -o -name '*.cpp' | xargs clang-format -i

clean:
	@rm -rf $(BUILD)
