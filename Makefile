# Earshot: `make run` opens the app, `make test` runs the suite. Both set up .venv on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch and torchaudio must come as a matching pair; this one runs on CPU and CUDA
TORCH_SPEC ?= torch==2.14.1 torchaudio==2.11.0
# PortAudio (microphone/speakers), espeak-ng (synthetic speech), Qt's runtime libraries, Xvfb
SYSTEM_PACKAGES := libportaudio2 espeak-ng xvfb libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0 \
  libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-shape0 \
  libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0
# the tests' real audio stack (tests/real_audio_stack.py): a private PulseAudio server with null sinks that
# PortAudio reaches through ALSA's pulse plugin; without these packages those tests are skipped
TEST_SYSTEM_PACKAGES := pulseaudio pulseaudio-utils libasound2-plugins
PYTEST_ARGS ?=
# aiSFX weights (CC BY 4.0) ship in this wheel; its pins (numpy==1.23, librosa==0.9.2) conflict with ours and
# only its checkpoint file is used, so it is installed without dependencies
AISFX_WHEEL ?= aisfx==0.1.2

.PHONY: run test test-fast bench lint system-deps test-system-deps clean

run: $(VENV)/.installed
	$(VENV)/bin/earshot

test: $(VENV)/.installed-test test-system-deps
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_ARGS)

# the suite without the tests marked slow (training runs, real models, subprocesses): see README, Testing
test-fast: $(VENV)/.installed-test test-system-deps
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

bench: $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) -m bench

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check app core models training tests bench tools

system-deps:
	@missing=""; \
	for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "Earshot needs PortAudio, espeak-ng and Qt's runtime libraries (Debian names:$$missing)."; \
	  echo "Install your platform's equivalents; continuing without them."; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "Installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
	  echo "Earshot needs these system packages. Install them with:"; \
	  echo "  sudo apt-get update && sudo apt-get install -y$$missing"; \
	  echo "Continuing: audio devices and the tests that need them stay disabled until then."; \
	fi

test-system-deps:
	@$(MAKE) --no-print-directory system-deps SYSTEM_PACKAGES="$(SYSTEM_PACKAGES) $(TEST_SYSTEM_PACKAGES)"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | system-deps $(VENV)/bin/python
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps $(AISFX_WHEEL)
	touch $@

$(VENV)/.installed-test: pyproject.toml | system-deps $(VENV)/bin/python
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps $(AISFX_WHEEL)
	touch $@ $(VENV)/.installed

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
