#!/usr/bin/env bash
# The GPU check (run on a lent CUDA machine from the repository root; see README "GPU"): the CUDA-only tests,
# the three trainers' tests (their `device=auto` trains on CUDA, with AMP, when it is there), one short
# command-line training of every kind on CUDA with bf16 (fp16 is in the trainer's CUDA tests: units, words,
# retrieval from scratch and on the frozen aiSFX tower), the words run again under torchrun (DDP, NCCL, one
# process per GPU), the aiSFX model's vectors on CUDA against the CPU's (bench/gpu_embed_check.py), the shipped
# units and words models as the Units and Words tabs run them (bench/gpu_services_check.py) and
# `earshot index --device cuda` of the demo library, searched afterwards on the CPU.
# Packages the machine lacks come as wheels in $CARRY/wheels, the tokenizer of the default text model as
# $CARRY/py, FSDD and a small sfx subset as $CARRY/data, the aiSFX weights (fp16 safetensors, to travel light)
# as $CARRY/aisfx16.safetensors. DEVICE=cpu AMP=off INSTALL=0 TESTS=... tries the script on a machine without a GPU.
# Output: $OUT/ (or ./gpu-out): pytest.log, junit.xml, train-*.log, embed.json, index.log.
set -u
DEVICE=${DEVICE:-cuda}
AMP=${AMP:-bf16}
CARRY=${CARRY:-gpu_carry}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
[ "${INSTALL:-1}" = 1 ] && python3 -m pip install -q --no-index --no-deps "$CARRY"/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH="$PWD/$CARRY/py:$PWD"
mkdir -p ../shared/data
for d in fsdd sfx; do [ -e "../shared/data/$d" ] || ln -s "$PWD/$CARRY/data/$d" "../shared/data/$d"; done
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
  nproc; } | tee "$OUT/machine.txt"
TESTS=${TESTS:-"tests/test_trainer.py tests/test_units_train.py tests/test_words_train.py tests/test_retrieval_train.py
  tests/test_vqvae.py tests/test_awe.py tests/test_retrieval.py tests/test_loudness.py"}
# shellcheck disable=SC2086  # TESTS is a list of paths
timeout 330 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --junitxml="$OUT/junit.xml" \
  --durations=10 $TESTS > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; tail -25 "$OUT/pytest.log"
data=../shared/data/fsdd
sfx=../shared/data/sfx
tiny_text='{"model": {"text": {"tiny": true, "name_or_path": null, "freeze": "all"}}}'  # MiniLM's weights stay behind (90 MB)
run() {  # name, seconds, command...: its log in $OUT/train-name.log, its exit status printed
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/train-$name.log" 2>&1
  echo "$name exit $? $(grep -o "precision: [a-z0-9]*" "$OUT/train-$name.log" | head -1)"
}
run units 90 python3 -m app train units --data "$data" --out "$OUT/units.safetensors" --preset tiny \
  --vq-steps 300 --inv-steps 100 --device "$DEVICE" --amp "$AMP"
grep -o "vqvae epoch [0-9/]* loss=[0-9.]*.*perplexity=[0-9.]*" "$OUT/train-units.log" | sed -n '1p;$p'
grep "codes_used" "$OUT/train-units.log"
run words 90 python3 -m app train words --data "$data" --out "$OUT/words.safetensors" --preset tiny \
  --epochs 30 --warmup-steps 20 --device "$DEVICE" --amp "$AMP"
grep -o "epoch [0-9]*/30 loss=[0-9.]*" "$OUT/train-words.log" | sed -n '1p;$p'; grep -o "dev_ap: [0-9.]*" "$OUT/train-words.log"
run words-ddp 120 torchrun --standalone --nproc_per_node "$( [ "$DEVICE" = cuda ] && nvidia-smi -L | wc -l || echo 2)" \
  -m app.cli train words --data "$data" --out "$OUT/words-ddp.safetensors" --preset tiny --epochs 10 \
  --warmup-steps 20 --device "$DEVICE" --amp "$AMP"
grep -o "processes: [0-9]*\|epoch [0-9]*/10 loss=[0-9.]*" "$OUT/train-words-ddp.log" | sed -n '1p;2p;$p'
run retrieval 120 python3 -m app train retrieval --data "$sfx" --preset cpu-small --epochs 8 --device "$DEVICE" \
  --amp "$AMP" --config "$tiny_text" --out "$OUT/retrieval.safetensors"
grep -o "epoch [0-9]*: loss [0-9.]*, val_map10 [0-9.]*" "$OUT/train-retrieval.log" | sed -n '1p;$p'
run retrieval-aisfx 150 python3 -m app train retrieval --data "$sfx" --preset aisfx --epochs 8 --device "$DEVICE" \
  --amp "$AMP" --config "$tiny_text" --audio-weights "$CARRY/aisfx16.safetensors" --out "$OUT/retrieval-aisfx.safetensors"
grep -o "epoch [0-9]*: loss [0-9.]*, val_map10 [0-9.]*" "$OUT/train-retrieval-aisfx.log" | sed -n '1p;$p'
timeout 120 python3 bench/gpu_embed_check.py "$OUT/retrieval-aisfx.safetensors" --device "$DEVICE" \
  --json "$OUT/embed.json" > "$OUT/embed.log" 2>&1; echo "embed check exit $?"; tail -3 "$OUT/embed.log"
timeout 120 python3 bench/gpu_services_check.py resources/models/units-default.safetensors \
  resources/models/words-default.safetensors "$data" --device "$DEVICE" --json "$OUT/services.json" \
  > "$OUT/services.log" 2>&1; echo "services check exit $?"; tail -14 "$OUT/services.log"
demo=$(mktemp -d)/demo; cp -r resources/demo "$demo"
{ timeout 120 python3 -m app index "$demo" --model "$OUT/retrieval-aisfx.safetensors" --device "$DEVICE"
  echo "index exit $?"
  timeout 60 python3 -m app search "a horse galloping" --library "$demo" --model "$OUT/retrieval-aisfx.safetensors" -k 3
  echo "search exit $?"; } > "$OUT/index.log" 2>&1; grep -v "^\[" "$OUT/index.log" | tail -12
rm -rf "$OUT"/*.safetensors "$OUT"/*.cache "$OUT"/.*.cache
