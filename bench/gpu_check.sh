#!/usr/bin/env bash
# The GPU check (run on a lent CUDA machine from the repository root; see README "GPU"): the CUDA-only tests,
# the three trainers' tests (their `device=auto` trains on CUDA, with AMP, when it is there) and one short
# command-line training per speech kind on CUDA with bf16 (fp16 is in the trainer's CUDA tests). Packages the machine lacks come as wheels in
# $CARRY/wheels, the tokenizer of the default text model as $CARRY/py, FSDD and a small sfx subset as $CARRY/data.
# Output: $OUT/ (or ./gpu-out): pytest.log, junit.xml, train-*.log, checkpoints' metrics.
set -u
CARRY=${CARRY:-gpu_carry}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps "$CARRY"/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH="$PWD/$CARRY/py:$PWD"
mkdir -p ../shared/data
for d in fsdd sfx; do [ -e "../shared/data/$d" ] || ln -s "$PWD/$CARRY/data/$d" "../shared/data/$d"; done
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
  nproc; } | tee "$OUT/machine.txt"
TESTS=${TESTS:-"tests/test_trainer.py tests/test_units_train.py tests/test_words_train.py tests/test_retrieval_train.py
  tests/test_vqvae.py tests/test_awe.py tests/test_retrieval.py"}
# shellcheck disable=SC2086  # TESTS is a list of paths
timeout 330 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --junitxml="$OUT/junit.xml" \
  --durations=10 $TESTS > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; tail -25 "$OUT/pytest.log"
data=../shared/data/fsdd
for amp in bf16; do
  timeout 90 python3 -m app train units --data "$data" --out "$OUT/units-$amp.safetensors" --preset tiny \
    --vq-steps 300 --inv-steps 100 --device cuda --amp "$amp" > "$OUT/train-units-$amp.log" 2>&1
  echo "units $amp exit $?"; grep -o "vqvae epoch [0-9/]* loss=[0-9.]*.*perplexity=[0-9.]*" "$OUT/train-units-$amp.log" | sed -n '1p;$p'
  grep "codes_used" "$OUT/train-units-$amp.log"
  timeout 90 python3 -m app train words --data "$data" --out "$OUT/words-$amp.safetensors" --preset tiny \
    --epochs 30 --warmup-steps 20 --device cuda --amp "$amp" > "$OUT/train-words-$amp.log" 2>&1
  echo "words $amp exit $?"; grep -o "epoch [0-9]*/30 loss=[0-9.]*" "$OUT/train-words-$amp.log" | sed -n '1p;$p'; grep -o "dev_ap: [0-9.]*" "$OUT/train-words-$amp.log"
done
rm -rf "$OUT"/*.safetensors "$OUT"/*.cache
