"""The decision tree as data: every contract §4 id is reachable, the order is the tree's, and it renders."""

import pytest

from estimator.advice.tree import ADVICE_ORDER, TREE, Node, advice_order, render_tree, walk

CONTRACT_IDS = (
    "profile-first attention-not-bottleneck use-fused-kernel flash-ineligible-dtype flash-ineligible-head-dim "
    "flash-ineligible-mask flash-ineligible-gpu pad-head-dim math-gqa-expansion gqa kv-cache-quantization "
    "window-attention reduce-seq-len reduce-batch activation-checkpointing context-parallel tensor-parallel "
    "split-prefill-decode log-backend fits"
).split()


def test_every_contract_id_and_the_eager_ids_are_in_the_tree():
    for advice_id in (*CONTRACT_IDS, "eager-to-sdpa", "inplace-masked-fill"):
        assert advice_id in ADVICE_ORDER, advice_id


def test_ids_are_unique_and_in_pre_order():
    assert len(ADVICE_ORDER) == len(set(ADVICE_ORDER))
    # the order: profile, then kernel, then architecture, then parallelism, then operations
    index = ADVICE_ORDER.index
    assert index("profile-first") < index("use-fused-kernel") < index("window-attention") < index("context-parallel")
    assert index("reduce-batch") < index("window-attention")  # over budget only at larger batch: batch first
    assert index("use-fused-kernel") < index("flash-ineligible-dtype")  # the reasons follow the kernel advice


def test_render_shows_every_node_and_id_once_per_node():
    text = render_tree()
    nodes = list(walk())
    assert len(text.splitlines()) == len(nodes)
    for _, label, node in nodes:
        assert node.text in text
        if label:
            assert f"{label}: {node.text}" in text
        for advice_id in node.advice:
            assert advice_id in text
    assert text.splitlines()[0] == TREE.text
    assert "└── " in text and "├── " in text and "│   " in text


def test_render_of_a_small_tree():
    small = Node(key="a", text="A?", branches=(("yes", Node(key="b", text="B", advice=("x",))),
                                               ("no", Node(key="c", text="C"))))
    assert render_tree(small) == "A?\n├── yes: B  [x]\n└── no: C"
    assert advice_order(small) == ("x",)


def test_node_validation_names_the_field():
    with pytest.raises(ValueError, match="key"):
        Node(key="", text="t")
    with pytest.raises(ValueError, match="branches"):
        Node(key="k", text="t", branches=(("", Node(key="c", text="c")),))


def test_docs_show_the_current_tree():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "advice.md").read_text(encoding="utf-8")
    assert render_tree() in doc, "docs/advice.md is out of date: paste `python -m estimator advise --tree`"
    for advice_id in ADVICE_ORDER:
        assert f"`{advice_id}`" in doc, advice_id
