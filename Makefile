# Two entry points that work on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TVMBENCH_CACHE ?= $(CURDIR)/.cache

.PHONY: bench test lint setup cross clean browser
CROSS_PACKAGES := g++-aarch64-linux-gnu qemu-user debootstrap

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,all]'
	touch $(STAMP)

# The default benchmark: resnet18, batch 1, on this machine's CPU, TVM against PyTorch eager.
bench: $(STAMP)
	$(BIN)/tvmbench run --model resnet18 --batch-size 1 --target llvm --frameworks tvm,pytorch \
		--output results/resnet18.json

# The suite in two parts: most files on TEST_WORKERS pytest-xdist workers (a file's tests stay on one
# worker, so its module fixtures are built once), then the tests marked `serial` alone, because they
# assert on timings that a second worker's load on the other core would distort (the timer, the host
# probe, lockstep turns). Both parts always run; either failing fails the target.
TEST_WORKERS ?= 2
test: $(STAMP) browser cross
	@status=0; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" || status=1; \
	$(BIN)/python -m pytest -q -m serial || status=1; \
	exit $$status

# Chromium for the HTML report's browser test, from the system's packages (Debian/Ubuntu). Without
# it that one test is skipped and says why; nothing else needs it.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends chromium) >/dev/null 2>&1 || echo "Chromium could not be installed: the report's \
		browser test will be skipped"

# The aarch64 cross compiler for `--target "llvm -mtriple=aarch64-linux-gnu"` exports, and qemu-user
# and debootstrap for the emulated device that runs them (Debian/Ubuntu), from the system's packages
# like Chromium: `make test` installs them so the aarch64 tests run instead of skipping; without
# them those tests are skipped and say why.
cross:
	@(command -v aarch64-linux-gnu-g++ && command -v qemu-aarch64 && test -x /usr/sbin/debootstrap) >/dev/null \
		|| (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CROSS_PACKAGES) \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$(CROSS_PACKAGES))) >/dev/null 2>&1 || echo "The aarch64 cross compiler or emulator could not be \
		installed: the aarch64 export and emulation tests will be skipped"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache .pytest_cache
