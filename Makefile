# The README's two quick-start commands: `make demo` and `make check`.
# CMake + Ninja do the building; this file installs what is missing and runs things.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 10
# Tests run side by side, one per core: each keeps to a folder of its own.
JOBS       ?= $(shell nproc)
CMAKE_GEN  := -G Ninja

# python3-yaml, tmux, librsvg2-bin (rsvg-convert renders the plot) and pandoc (the man pages
# from docs/, cmake/manpages.cmake) are test prerequisites: the tests fail, not skip, without
# them. The plot's test reads its SVG and PNG back with libxml2-dev and libpng-dev.
APT_PACKAGES := cmake ninja-build pkgconf gcc clang libclang-rt-14-dev \
                libyaml-dev libjansson-dev libcmocka-dev libncurses-dev \
                python3 python3-yaml tmux libsqlite3-dev librsvg2-bin libxml2-dev libpng-dev \
                pandoc
# The tracer's environments: venvs of Debian's Python 3.11 and a C++ shim against torch.
TRACE_APT_PACKAGES := python3 python3-venv g++
# litgpt@0.3.0: the release the tracer's self-check against litgpt's measurements runs
TRACE_FRAMEWORKS ?= hf litgpt torchtune lightning litgpt@0.3.0

.PHONY: all deps build demo check test asan fuzz bench clean trace-env trace-test traces traces-multi-gpu uncertainty \
        py-env py-lint py-install wheel

all: build

deps:
	@sh scripts/deps.sh $(APT_PACKAGES)

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD)

demo: build
	sh scripts/demo.sh $(BUILD)/vramfit

test: build trace-env
	cd $(BUILD) && ctest -j$(JOBS) --output-on-failure

# One Python environment per traced framework under .venv-trace/ (pinned requirements in
# python/requirements/); `vramfit trace` and the tracer's tests run in them.
trace-env:
	@sh scripts/deps.sh $(TRACE_APT_PACKAGES)
	sh scripts/trace-env.sh $(TRACE_FRAMEWORKS)

trace-test: build trace-env
	sh scripts/trace-tests.sh

# The Python package (python/pyproject.toml): mypy --strict and ruff in .venv-dev
# (python/requirements/dev.txt); `pip install ./python` into a fresh environment, checked
# there; the wheel with libvramfit.so inside, manylinux-tagged by auditwheel (build/wheel/).
py-env:
	@sh scripts/deps.sh $(TRACE_APT_PACKAGES)
	sh scripts/python-package.sh env

py-lint: py-env
	sh scripts/python-package.sh lint

py-install: build
	BUILD=$(BUILD) sh scripts/python-package.sh install

wheel: build py-env
	BUILD=$(BUILD) sh scripts/python-package.sh wheel

# The traced corpus (bench/traced/*.tsv): every setup of bench/traced/setups.sh traced
# again; TRACES=hf- (an id prefix) retraces a part. Takes about an hour for all.
traces: build trace-env
	sh bench/traced/setups.sh | $(BUILD)/bench/bench_traces $(BUILD)/vramfit bench/traced $(TRACES)

# The multi-GPU traced corpus (bench/traced/multi-gpu/*.tsv), held to the accuracy gate's
# targets. About twelve minutes.
traces-multi-gpu: build trace-env
	sh bench/traced/multi-gpu/setups.sh | $(BUILD)/bench/bench_traces $(BUILD)/vramfit bench/traced/multi-gpu $(TRACES)

# data/uncertainty.json, every estimate's range: the estimator's spread on the traced corpus
# and the published cases, per group of setups (bench/spread). Rerun after the estimator or a
# corpus changes; the build after it embeds the new file.
uncertainty: build
	$(BUILD)/bench/bench_spread $(BUILD)/vramfit ../shared/calibration/published.tsv bench/traced data/uncertainty.json
	cmake --build $(BUILD)

asan: deps trace-env
	cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DVF_SANITIZE=ON
	cmake --build $(ASAN_BUILD)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest -j$(JOBS) --output-on-failure

fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DVF_SANITIZE=ON -DVF_FUZZ=ON
	cmake --build $(FUZZ_BUILD) --target fuzzers
	sh scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

check: test trace-test py-lint py-install wheel asan fuzz
	@echo "make check: all tests passed (plain, Python, ASan+UBSan, fuzz $(FUZZ_SECONDS)s per target)"

bench: build
	sh bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
