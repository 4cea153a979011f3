"""Golden against the H200: every committed whole-model row (validation/data/h200_hf_*.csv, written by
`python -m validation.hf_models`) re-planned from the very config it was built from. The counts pin what the
plan reaches today; a change that loses a row fails here."""

from __future__ import annotations

import pandas as pd
import pytest

from validation.model.model_report import compare

# file -> rows that ran and must be within max(3%, 2 MiB)
WITHIN = {
    "h200_hf_recipes.csv": 102,  # of 102
    "h200_hf_windows_a.csv": 20,  # of 21
    "h200_hf_windows_b.csv": 18,  # of 18 (flex)
    "h200_hf_time.csv": 19,  # of 19 (measured after the recipes model was fitted: held out)
    "h200_hf_archs.csv": 31,  # of 33
    "h200_hf_heldout.csv": 16,  # of 16, measured after every model change: held out
    "h200_hf_heldout_b.csv": 15,  # of 16 (Phi-3 prefill at 24k: -3.3%)
    "h200_hf_decode.csv": 7,  # of 7, measured after every memory change
    # held out, measured after the time-model changes; its Phi-3 bf16-true training row (5.5% above the plan)
    # showed the fused qkv buffer the saved v keeps alive, modelled since
    "h200_hf_heldout_c.csv": 23,  # of 23
    "h200_hf_decode_heldout_p1.csv": 12,  # of 12, held out
    "h200_hf_decode_heldout_p2.csv": 12,  # of 12, the same cases in a second process
}
# Out-of-memory runs the plan still calls "fits": gpt-oss-20b training at 8,192 tokens failed with 113 GiB
# allocated and about 11 GiB cached in pieces, asking for 16 GiB; the plan says 122 GiB + a 16 GiB block fits.
KNOWN_OOM_MISSES = {("gpt-oss-20b", "8192")}


def rows(name: str) -> pd.DataFrame:
    return compare(pd.read_csv(f"validation/data/{name}", dtype=str, keep_default_na=False))


@pytest.mark.parametrize("name", sorted(WITHIN))
def test_measured_peaks_are_within_tolerance(name):
    result = rows(name)
    ok = result[result["status"] == "ok"]
    assert int(ok["within_tolerance"].sum()) >= WITHIN[name], ok[~ok["within_tolerance"].astype(bool)][
        ["family", "attn_implementation", "mode", "precision", "checkpointing", "seq_len", "rel_err"]]


@pytest.mark.parametrize("name", sorted(WITHIN))
def test_every_out_of_memory_run_is_planned_as_not_fitting(name):
    result = rows(name)
    oom = result[result["status"] == "oom"]
    missed = {(r["family"], str(r["seq_len"])) for r in oom.to_dict("records") if r["plan_fits"]}
    assert missed <= KNOWN_OOM_MISSES, missed


def test_near_the_limit_the_largest_block_decides():
    # the two held-out pairs bracketing the H200's capacity: all four ran out of memory, two of them with the
    # peak planned below capacity; the allocator reserve (the step's largest block) calls them
    result = rows("h200_hf_heldout.csv")
    near = result[(result["status"] == "oom") & (result["planned_peak_bytes"] < 139 * 2**30)]
    assert len(near) == 2 and not near["plan_fits"].astype(bool).any()


def test_recipe_parameter_counts_match_the_built_models():
    result = rows("h200_hf_recipes.csv")
    ok = result[result["status"] == "ok"]
    assert (ok["planned_params"] == ok["measured_params"]).all()
