#!/usr/bin/env bash
# The one-GPU proof of `python -m validation model --config/--preset` (docs/validation.md "Your own model on one
# GPU"): a config.json outside validation/model/hf_configs.py's families and built-in presets, each case in its own
# process; the same built-in cases through `python -m validation.hf_models` (hf_cases.csv, one process each) to
# show the rows are equal; the Validate page on the GPU (page_check.py); the report. The most telling cases run
# first and the report is written twice, so a run cut short still leaves one.
# Usage: bash validation/cases/own_model/run_h200.sh OUT_DIR [PYTHON] [page]
# With `page` only the Validate page's proof runs: the two command rows the page is compared with, then the page
# for the same two cases (a built-in preset and a user's config.json). The page needs streamlit installed.
set -u
OUT=${1:?usage: run_h200.sh OUT_DIR [PYTHON] [page]}
PY=${2:-python}
ONLY=${3:-all}
HERE=validation/cases/own_model
mkdir -p "$OUT"
rm -f "$OUT"/own.csv "$OUT"/hf.csv "$OUT"/hf_*.csv
M="$PY -m validation model --out $OUT/own.csv --append"

hf_case() {  # line $1 of hf_cases.csv through validation.hf_models in its own process
  { head -1 $HERE/hf_cases.csv; sed -n "${1}p" $HERE/hf_cases.csv; } > "$OUT/case_$1.csv"
  $PY -m validation.hf_models --cases "$OUT/case_$1.csv" --out "$OUT/hf_$1.csv"
  { [ -s "$OUT/hf.csv" ] || head -1 "$OUT/hf_$1.csv"; tail -n +2 "$OUT/hf_$1.csv"; } >> "$OUT/hf.csv"
}
report() {
  $PY -m validation.model.own_report "$OUT/own.csv" --against "$OUT/hf.csv" --md "$OUT/own_report.md"
  echo "own_report exit status $? (0: every compared row equal to hf_models)"
}

page() {  # the Validate page on this GPU for one case (page_check.py), against the command's row of that case
  PLANNER_ENABLE_GPU_JOBS=true $PY $HERE/page_check.py "$OUT" "$1"
  echo "page_check $1 exit status $?"
}

{
date -u
if [ "$ONLY" = page ]; then
  $M --config $HERE/qwen3-8b-shapes.json --layers 4 --mode training --seq-len 8192
  $M --preset llama-3.1-8b --layers 4 --mode training --seq-len 8192
  page config
  page preset
  date -u
  exit 0
fi
# a user's config.json, not a built-in family: Qwen3-8B's sizes (qwen3: q/k norms), cut to 4 layers
$M --config $HERE/qwen3-8b-shapes.json --layers 4 --mode training --seq-len 8192
$M --config $HERE/qwen3-8b-shapes.json --layers 4 --mode inference --seq-len 32768
# built-in presets and the same cases through validation.hf_models (hf_cases.csv lines 2, 3)
$M --preset llama-3.1-8b --layers 4 --mode training --seq-len 8192
$M --preset llama-3.1-8b --layers 4 --mode inference --seq-len 16384
hf_case 2
hf_case 3
# the Validate page on this GPU, training at 8192 cut to 4 layers, against the command's rows
page config
page preset
report
# more presets (hf_cases.csv lines 4, 5), then the rest
$M --preset mistral-7b --layers 4 --mode inference --seq-len 16384
$M --preset qwen2.5-7b --layers 4 --mode training --precision bf16-true --optimizer sgd --seq-len 8192
hf_case 4
hf_case 5
# the whole qwen3 model does not fit bf16-mixed training: cut to the most layers the guard allows
$M --config $HERE/qwen3-8b-shapes.json --fit-layers --mode training --checkpointing hf --seq-len 16384
# a family transformers builds and the planner does not model: measured, the plan's refusal in the row
$M --config $HERE/olmo2-small.json --layers 4 --mode inference --seq-len 8192 --force
$M --preset mixtral-8x7b --layers 2 --mode inference --seq-len 8192
report
date -u
} 2>&1 | tee "$OUT/log.txt"
