"""The advisor's decision tree (estimator/advice/tree.py) as a Graphviz DOT graph for st.graphviz_chart.

Left to right, so that its four levels fit the page's width (a top-down layout of 20 leaves would not); each node
shows the branch that leads to it and the advice ids it yields; the nodes on the current plan's path (those whose
advice the advisor gave, and their ancestors) are filled and their edges drawn thick. Pure: no Streamlit.
"""

from __future__ import annotations

import textwrap

from estimator.advice.tree import TREE, Node


def _label(lines: list[str]) -> str:
    """A DOT record-free label: lines joined with \\l (left-justified), quotes and backslashes escaped."""
    out = []
    for line in lines:
        out.append(line.replace("\\", "\\\\").replace('"', '\\"'))
    return "\\l".join(out) + "\\l"


def _on_path(node: Node, ids: set[str]) -> bool:
    return bool(set(node.advice) & ids) or any(_on_path(child, ids) for _, child in node.branches)


def tree_dot(advice_ids: set[str] | frozenset[str] = frozenset(), width: int = 30) -> str:
    """DOT source of the tree; `advice_ids` (the current plan's advice) highlight their path."""
    ids = set(advice_ids)
    lines = ['digraph tree {', '  rankdir=LR; nodesep=0.12; ranksep=0.3;',
             '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=10, margin="0.08,0.04"];',
             '  edge [color="#999999"];']
    counter = [0]

    def visit(node: Node, label: str) -> str:
        counter[0] += 1
        name = f"n{counter[0]}"
        text = textwrap.wrap(label or "start: the estimator's plan", width)
        if node.advice:
            text += textwrap.wrap("→ " + ", ".join(node.advice), width)
        hot = _on_path(node, ids) if ids else False
        style = 'style="rounded,filled", fillcolor="#FFE08A", penwidth=2' if hot else ""
        tooltip = node.text.replace('"', "'")
        lines.append(f'  {name} [label="{_label(text)}", tooltip="{tooltip}"{", " + style if style else ""}];')
        for child_label, child in node.branches:
            child_name = visit(child, child_label)
            child_hot = hot and _on_path(child, ids)
            lines.append(f"  {name} -> {child_name}" + (' [color="#B8860B", penwidth=2.5]' if child_hot else "") + ";")
        return name

    visit(TREE, "")
    lines.append("}")
    return "\n".join(lines)
