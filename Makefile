# delan_ros: the commands a user types. Everything runs inside .venv (made by `make setup`).
SHELL := /bin/bash
ROBOT ?= two_link_arm.urdf
PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: setup test lint demo shell bench clean distclean

setup:  ## venv from pinned PyPI wheels + colcon build (idempotent)
	@bash scripts/setup.sh

test: setup  ## the whole pytest suite of all packages (scripts/test.sh: two passes)
	@bash scripts/test.sh $(PYTEST_ARGS)

lint: setup  ## ruff lint and format check (ruff.toml) over every package, bench/ and tests/; mypy
	@.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

demo: setup  ## the main job: sim, learn online, compare controllers, write out/demo/report.md
	@source env.sh && python -m delan_control.demo --robot $(ROBOT) --out out/demo $(DEMO_ARGS)

shell: setup  ## an interactive shell with everything sourced
	@bash --rcfile <(echo 'source ~/.bashrc 2>/dev/null; source env.sh; PS1="(delan_ros) $$PS1"')

# benches that read a demo's output folder (--demo DIR) run after a demo, by hand (bench/README.md)
DEMO_BENCHES := bench/bench_learner_replay.py bench/bench_learning_curves.py bench/bench_residual.py \
	bench/bench_model_terms.py bench/bench_learning_phase.py

bench: setup  ## every self-contained benchmark (print tables); see bench/README.md
	@source env.sh && for b in $(filter-out $(DEMO_BENCHES),$(wildcard bench/bench_*.py)); do \
		echo "== $$b"; python $$b || exit 1; done

clean:  ## build outputs only
	rm -rf build install log out

distclean: clean
	rm -rf .venv
