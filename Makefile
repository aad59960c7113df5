# make book  -> .venv (created if missing) + the executed book in _build/html
# make test  -> .venv (created if missing) + the whole test suite
# make bench -> the CPU benchmark of solutions.MultiHeadAttention against nn.MultiheadAttention
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# nbgrader runs `alembic` from PATH: keep the environment's bin/ first.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYTHONPATH := $(CURDIR)
export MPLBACKEND := Agg

.PHONY: venv book test bench clean

venv: $(STAMP)

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==24.3.1
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --keep-going

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/bench_mha.py

clean:
	rm -rf _build .pytest_cache .hypothesis
