#!/usr/bin/env bash
# The one-GPU proof of `python -m validation model --config/--preset` (docs/validation.md "Your own model"):
# own configs outside validation/model/hf_configs.py and built-in presets, each case in its own process; the same
# cases through `python -m validation.hf_models` (one process each) to show the rows are equal; the Validate page
# run on the GPU; one report. Usage: bash validation/cases/own_model/run_h200.sh OUT_DIR [PYTHON]
set -u
OUT=${1:?usage: run_h200.sh OUT_DIR [PYTHON]}
PY=${2:-python}
HERE=validation/cases/own_model
mkdir -p "$OUT"
M="$PY -m validation model --out $OUT/own.csv --append"
rm -f "$OUT/own.csv" "$OUT/hf.csv"
{
# a user's config.json, not a built-in family (Qwen3-8B's sizes; qwen3 has q/k norms)
$M --config $HERE/qwen3-8b-shapes.json --layers 4 --mode training --seq-len 8192
$M --config $HERE/qwen3-8b-shapes.json --layers 4 --mode inference --seq-len 32768
$M --config $HERE/qwen3-8b-shapes.json --fit-layers --mode training --precision bf16-true --checkpointing hf --seq-len 16384
# a family transformers builds and the planner does not model: measured, the plan's refusal in the row
$M --config $HERE/olmo2-small.json --layers 4 --mode inference --seq-len 8192 --force
# built-in presets (the same cases as hf_cases.csv, in its order), then one MoE
$M --preset llama-3.1-8b --layers 4 --mode training --seq-len 8192
$M --preset llama-3.1-8b --layers 4 --mode inference --seq-len 16384
$M --preset mistral-7b --layers 4 --mode inference --seq-len 16384
$M --preset qwen2.5-7b --layers 4 --mode training --precision bf16-true --optimizer sgd --seq-len 8192
$M --preset mixtral-8x7b --layers 2 --mode inference --seq-len 8192
# the same four built-in cases through validation.hf_models, one process per case
head -1 $HERE/hf_cases.csv > "$OUT/case.csv"
for i in 2 3 4 5; do
  { head -1 $HERE/hf_cases.csv; sed -n "${i}p" $HERE/hf_cases.csv; } > "$OUT/case.csv"
  $PY -m validation.hf_models --cases "$OUT/case.csv" --out "$OUT/hf_$i.csv"
done
{ head -1 "$OUT/hf_2.csv"; for i in 2 3 4 5; do tail -n +2 "$OUT/hf_$i.csv"; done; } > "$OUT/hf.csv"
# the Validate page on this GPU (streamlit AppTest), its row against the command's for the same case
PLANNER_ENABLE_GPU_JOBS=true $PY $HERE/page_check.py "$OUT"
$PY -m validation.model.own_report "$OUT/own.csv" --against "$OUT/hf.csv" --md "$OUT/own_report.md"
echo "report exit status $? (0: every compared row equal to hf_models)"
} 2>&1 | tee "$OUT/log.txt"
