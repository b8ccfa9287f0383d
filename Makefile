# The README's two commands: `make run` and `make test`. Everything else is a step of those.
BUILD ?= build
JOBS ?= $(shell nproc)
CACHE ?= $(HOME)/.cache/moeserve
DEMO_MODEL ?= models/qwen3-moe-kjv
PROMPT ?= The LORD is my shepherd

# CTest starts the longest tests first when it knows their durations (Testing/Temporary/
# CTestCostData.txt, which each run rewrites); a fresh clone has none, so each build folder's are
# kept in $(CACHE)/ctest-costs between clones. Only the order depends on them, never a verdict.
# $(call ctest_in,<build folder>,<ctest command>); a red run ends with why each failed test failed
# (tools/failed_tests_digest.sh), since a CI record keeps only the end of the output.
define ctest_in
	@mkdir -p $(1)/Testing/Temporary $(CACHE)/ctest-costs
	@[ -f $(1)/Testing/Temporary/CTestCostData.txt ] || cp $(CACHE)/ctest-costs/$(notdir $(1)).txt $(1)/Testing/Temporary/CTestCostData.txt 2>/dev/null || true
	@cd $(1) && { $(2); rc=$$?; cp Testing/Temporary/CTestCostData.txt $(CACHE)/ctest-costs/$(notdir $(1)).txt 2>/dev/null; \
	  [ $$rc -eq 0 ] || bash $(CURDIR)/tools/failed_tests_digest.sh .; exit $$rc; }
endef

.PHONY: setup configure build test test-sanitize test-asan test-tsan run generate bench format tidy clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_WERROR=ON -DMOESERVE_CACHE_DIR=$(CACHE) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@python3 tools/check_layering.py
	@bash tools/check_format.sh
	$(call ctest_in,$(BUILD),ctest --output-on-failure -j $(JOBS) --timeout 900)

# Sanitizer builds (CI runs them after `make test`). ASan + UBSan: every suite. TSan: the threaded
# pieces: the unit suites of core (thread pool), serve (HTTP server, engine client), ipc (channel),
# parallel (LocalComm, the desync guard, Gloo rank processes) and eplb (EPLB's mover thread); the
# engine tests that run threads (DP engine loops over LocalComm, the DP coordinator, the TP
# broadcast, the KV-transfer agent, DP rank processes, the grammar compile worker); and the API
# server with two API server processes over one engine (integration.api_server_equal, the binary built with TSan).
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
ASAN_ENV = MOESERVE_SANITIZER=address ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tools/tsan.supp
TSAN_TARGETS = moeserve moeserve_core_tests moeserve_serve_tests moeserve_ipc_tests moeserve_parallel_tests \
	moeserve_parallel_rank_helper moeserve_engine_tests moeserve_engine_dp_rank_helper moeserve_eplb_tests
TSAN_LABELS = '^(core|serve|ipc|parallel|eplb)$$'
TSAN_TESTS = '^(DpQwen3Test|DpCoordinator|DpCoordinatorFake|TpBroadcastTest|KvTransferTest|DpProcessTest)\.|^StructuredOutputTest\.(GrammarsCompileOffTheStepPath|AbortWhileCompilingEndsTheRequest)$$|^integration\.api_server_equal$$'

test-sanitize: test-asan test-tsan

test-asan: setup
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_SANITIZE=address -DMOESERVE_WERROR=ON -DMOESERVE_BENCHMARKS=OFF -DMOESERVE_CACHE_DIR=$(CACHE) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	$(call ctest_in,$(ASAN_BUILD),$(ASAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 900)

test-tsan: setup
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESERVE_SANITIZE=thread -DMOESERVE_WERROR=ON -DMOESERVE_BENCHMARKS=OFF -DMOESERVE_CACHE_DIR=$(CACHE) >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS)
	$(call ctest_in,$(TSAN_BUILD),$(TSAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 900 -L $(TSAN_LABELS))
	$(call ctest_in,$(TSAN_BUILD),$(TSAN_ENV) ctest --output-on-failure -j $(JOBS) --timeout 900 -R $(TSAN_TESTS))

run: build
	@bash scripts/run_demo.sh $(BUILD)/src/moeserve/cli/moeserve $(DEMO_MODEL)

generate: build
	@$(BUILD)/src/moeserve/cli/moeserve generate --model $(DEMO_MODEL) --prompt "$(PROMPT)" --max-tokens 32

bench: build
	@for b in $(BUILD)/benchmarks/*_bench; do $$b --benchmark_min_time=0.3; done

format:
	@find src tests benchmarks fuzz \( -name '*.h' -o -name '*.cpp' \) | xargs clang-format -i

# clang-tidy (.clang-tidy) over src/ with the build's compile_commands.json: fails on any finding
# (WarningsAsErrors is '*'). tools/tidy_cached.py re-checks only the units whose source, headers,
# flags, .clang-tidy or clang-tidy changed since a clean run of theirs (a full run takes about
# 20 CPU-minutes); it reads the headers of each unit from the build, hence `build` first.
# Not part of `make test`; .ci/run runs it after `make test`.
# The compile commands are g++'s: clang is told to ignore g++-only flags and not to turn its own
# warnings into errors (-Werror is in them), so only the checks decide. BOOST_ASIO_HAS_CO_AWAIT:
# Boost.Asio looks for <experimental/coroutine> under clang, which libstdc++ 12 lacks, and so
# hides its coroutine API (serve/upstream_call.cpp, bench/serve_bench.cpp); clang 14 handles
# libstdc++'s <coroutine>, which Asio then uses as it does under g++.
tidy: build
	@python3 tools/tidy_cached.py $(BUILD) $(CACHE)/tidy --record .ci/tidy-clean.txt -j $(JOBS) --extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-error --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1

clean:
	@rm -rf $(BUILD)
