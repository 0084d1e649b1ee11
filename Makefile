# Two entry points that work on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TVMBENCH_CACHE ?= $(CURDIR)/.cache

.PHONY: bench test lint setup cross clean

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

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The aarch64 cross compiler for `--target "llvm -mtriple=aarch64-linux-gnu"` exports (Debian/Ubuntu).
cross:
	command -v aarch64-linux-gnu-g++ || sudo apt-get install -y --no-install-recommends g++-aarch64-linux-gnu \
		|| apt-get install -y --no-install-recommends g++-aarch64-linux-gnu

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache .pytest_cache
