"""A replay of PyTorch autograd's memory: the forward's tensors, what each op's backward node saves, and the
backward pass's gradient buffers, in bytes and in program order. Pure arithmetic, no torch.

Used for training through transformers' torch fallback of the Mamba2 mixer (estimator/model/ssm_train.py), where
the chunked scan's broadcast products make the backward's gradient tensors the largest allocations of the step.
The rules are those of PyTorch 2.11 (torch/csrc/autograd/engine.cpp, input_buffer.cpp, FunctionsManual.cpp and
tools/autograd/derivatives.yaml):
  - a tensor's storage lives while a Python name, a node's saved variable or a gradient buffer holds it; a view
    holds its base's storage (`Graph.view`);
  - a node's saved variables are released right after its backward runs (`release_variables`, no retain_graph);
  - the backward of a broadcast `mul` computes the full-size gradient of every input that needs one before the
    engine reduces them (`validate_outputs` calls `at::sum_to`, one after the other), so two tensors of the
    product's size are alive at once;
  - the gradient of add, of every view op, of `sum` (an expand) and of `cat` (narrowed slices) is a view of the
    incoming gradient; pad, slice, select, split, repeat (expand), a dtype cast and every unary op allocate one
    input-sized gradient; cumsum's is flip, cumsum, flip;
  - a second gradient into one tensor is added out of place (the buffer holds a view or is shared);
  - nodes run in reverse creation order (one device: the ready queue is ordered by sequence number).
Checked against the storages PyTorch really allocates in a CPU training step of transformers' Mamba2 mixer and
whole models (tests/test_hybrid_train.py, validation/model/live_bytes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from estimator.model.ssm_mamba2 import Trace

# backward kinds: how the gradient of each input is made from the output's
VIEW = "view"  # a view of the incoming gradient (view ops, add, sum, cat, clone)
NEW = "new"  # one allocation of the input's size (unary ops, casts, pad, slice, select, split, expand)
MUL = "mul"  # grad · other: a product-sized allocation for every input that needs a gradient, then sum_to
CUMSUM = "cumsum"  # flip, cumsum, flip
NONE = "none"  # no gradient flows (integer ops, masks)


@dataclass
class Node:
    out: str
    inputs: tuple[str, ...]
    kind: str
    saved: tuple[str, ...]  # storage keys
    out_bytes: int
    extra: tuple[tuple[str, int], ...] = ()  # (parameter gradient name, bytes) the node's backward allocates
    transient: int = 0  # bytes its backward allocates and frees (a kernel's workspace)
    new_bytes: dict = field(default_factory=dict)  # input -> gradient bytes when not the input's own size
    kinds: dict = field(default_factory=dict)  # input -> backward kind, where it differs from `kind`
    gemm: tuple[int, int, int] | None = None  # (m, n, k) of a linear layer: its backward is two GEMMs
    backward_ms: float | None = None  # a kernel priced elsewhere (the attention call's backward)


class Graph:
    """Tensors by name. `tensor`/`op` create, `drop` unbinds a Python name; `backward(loss)` runs the engine.
    `trace` (a ssm_mamba2.Trace) holds the live bytes, the peak and the allocator events of everything."""

    def __init__(self) -> None:
        self.trace = Trace()
        self._storage: dict[str, int] = {}  # key -> bytes
        self._holders: dict[str, set] = {}
        self._tensor: dict[str, tuple[str, int, bool]] = {}  # name -> (storage key, bytes, requires grad)
        self._grad: dict[str, str] = {}  # tensor name -> storage key of its gradient buffer
        self.nodes: list[Node] = []
        self.param_grad_bytes = 0
        self._n = 0
        self._slotted: set[str] = set()  # multi-output nodes' buffers: one gradient slot per output
        self._slots: dict[str, list[str]] = {}
        self._current: dict[str, str] = {}  # Python name -> the node-level tensor it holds now
        self.kernels: list[tuple[str, object]] = []  # forward: ("gemm", (m, n, k)) or ("memory", bytes moved)
        self.backward_kernels: list[tuple[str, object]] = []

    # --- storages ---
    def _new_storage(self, nbytes: int, holder: str) -> str:
        self._n += 1
        key = f"s{self._n}"
        self._storage[key] = nbytes
        self._holders[key] = {holder}
        self.trace.add(key, nbytes)
        return key

    def _hold(self, key: str, holder: str) -> None:
        self._holders[key].add(holder)

    def _release(self, key: str, holder: str) -> None:
        hs = self._holders.get(key)
        if hs is None:
            return
        hs.discard(holder)
        if not hs:
            del self._holders[key], self._storage[key]
            self.trace.free(key)

    # --- forward ---
    def tensor(self, name: str, nbytes: int, *, grad: bool = False) -> None:
        """A new tensor bound to `name` (no node: a leaf, a mask, an input)."""
        self.drop(name)
        key = self._new_storage(nbytes, "py:" + name)
        self._tensor[name] = (key, nbytes, grad)
        if grad:  # a leaf that needs a gradient: AccumulateGrad keeps it in `.grad`
            self._tensor[name + "@leaf"] = (key, nbytes, True)
            self._current[name] = name + "@leaf"
        else:
            self._current.pop(name, None)

    def requires_grad(self, name: str) -> bool:
        return name in self._tensor and self._tensor[name][2]

    def op(self, out: str, nbytes: int, inputs: tuple[str, ...] = (), *, kind: str = NEW,
           saves: tuple[str, ...] = (), view_of: str | None = None, params: tuple[tuple[str, int], ...] = (),
           transient: int = 0, grad_bytes: dict | None = None, kinds: dict | None = None,
           gemm: tuple[int, int, int] | None = None, fixed_ms: tuple[float, float] | None = None,
           cls: tuple[str, int] | None = None) -> None:
        """`out` = an op of `inputs` (names), `nbytes` its size; `view_of`: it is a view of that tensor (no new
        storage); `saves`: the tensors whose storages its backward node keeps; `params`: parameter gradients its
        backward allocates (kept until the optimizer step)."""
        saved_keys = tuple(self._tensor[s][0] for s in saves)
        if view_of is None:  # one kernel: a GEMM, or a memory-bound op that reads its inputs and writes `out`
            sizes = [self._tensor[i][1] for i in inputs if i in self._tensor]
            read = sum(sizes)
            if gemm:
                self.kernels.append(("gemm", gemm))
            elif fixed_ms:
                self.kernels.append(("fixed", fixed_ms[0]))
            elif cls:  # a kernel class of its own: ("reduce_last", innermost size): a sum over the innermost dim
                self.kernels.append((cls[0], (read, cls[1])))
            elif kind == MUL and sizes and nbytes > 2 * max(sizes):  # a broadcast product: priced by what it writes
                self.kernels.append(("broadcast", nbytes))
            else:
                self.kernels.append(("memory", read + nbytes))
        grad = any(self.requires_grad(i) for i in inputs) or bool(params)
        if view_of is not None:  # the result exists before the name is rebound (`x = f(x)`)
            key = self._tensor[view_of][0]
            self._hold(key, "pending")
        else:
            key = self._new_storage(nbytes, "pending")
        aliases = tuple(self._alias(n) for n in inputs)
        self.drop(out)
        self._hold(key, "py:" + out)
        self._holders[key].discard("pending")
        if grad:
            i = len(self.nodes)
            for k in saved_keys:
                self._hold(k, f"node{i}")
            self.nodes.append(Node(out=f"{out}@{i}", inputs=aliases, kind=kind,
                                   saved=saved_keys, out_bytes=nbytes, extra=params, transient=transient,
                                   new_bytes={self._alias(k): v for k, v in (grad_bytes or {}).items()},
                                   kinds={self._alias(k): v for k, v in (kinds or {}).items()}, gemm=gemm,
                                   backward_ms=fixed_ms[1] if fixed_ms else None))
            self._tensor[f"{out}@{i}"] = (key, nbytes, True)
            self._current[out] = f"{out}@{i}"
        else:
            self._current.pop(out, None)
        self._tensor[out] = (key, nbytes, grad)

    def _alias(self, name: str) -> str:
        """The node-level identity of the tensor a Python name holds now (names are rebound)."""
        return self._current.get(name, f"leaf:{name}")

    def save_result(self, name: str) -> None:
        """The op just recorded (which made `name`) saves its own result for its backward (exp, rsqrt,
        log_softmax: the gradient is computed from the output)."""
        key = self._tensor[name][0]
        node = self.nodes[-1]
        node.saved = node.saved + (key,)
        self._hold(key, f"node{len(self.nodes) - 1}")

    def view(self, out: str, of: str) -> None:
        """A view (reshape, permute, slice, split piece, [..., None]) whose backward is a view too."""
        self.op(out, self._tensor[of][1], (of,), kind=VIEW, view_of=of)

    def split(self, src: str, pieces: dict[str, int]) -> None:
        """torch.split / tensor.split (and the view ops around it): `pieces` (name -> bytes) are views of `src`.
        One SplitWithSizesBackward node waits for every piece's gradient, then allocates `src`'s size (a cat)."""
        whole = src + "#split"
        self.op(whole, self._tensor[src][1], (src,), kind=NEW, view_of=src)
        if self.nodes and self.nodes[-1].out.startswith(whole + "@"):
            self._slotted.add(self.nodes[-1].out)
        for name, nbytes in pieces.items():
            self.op(name, nbytes, (whole,), kind=VIEW, view_of=whole)
            self._tensor[name] = (self._tensor[name][0], nbytes, self._tensor[name][2])
        self.drop(whole)

    def drop(self, *names: str) -> None:
        for name in names:
            t = self._tensor.pop(name, None)
            if t is not None:
                self._release(t[0], "py:" + name)

    def rename(self, old: str, new: str) -> None:
        """Bind the tensor of `old` to `new` and unbind `old` (the Python name `new = old`; `del old`)."""
        self.drop(new)
        key, nbytes, grad = self._tensor.pop(old)
        self._holders[key].discard("py:" + old)
        self._hold(key, "py:" + new)
        self._tensor[new] = (key, nbytes, grad)
        if old in self._current:
            self._current[new] = self._current.pop(old)

    @property
    def live(self) -> int:
        return self.trace.now

    # --- backward ---
    def backward(self, loss: str) -> None:
        """loss.backward(): the root gradient (a scalar), then every node in reverse creation order."""
        root = self._alias(loss)
        self._grad[root] = self._new_storage(self._tensor[root][1], "grad:" + root)
        for i in range(len(self.nodes) - 1, -1, -1):
            node = self.nodes[i]
            gkey = self._grad.pop(node.out, None)
            slots = self._slots.pop(node.out, [])
            if gkey is None and slots:
                gkey = slots.pop()
            if gkey is None:  # no gradient reached this node: it is freed unused
                for k in node.saved:
                    self._release(k, f"node{i}")
                continue
            made: list[tuple[str, str]] = []  # (input, storage key of its gradient)
            wanted = [name for name in node.inputs if self._wants(name)]
            muls = [name for name in wanted if node.kinds.get(name, node.kind) == MUL]
            full = [(name, self._new_storage(node.out_bytes, f"tmp{i}:{name}")) for name in muls]
            for name, fkey in full:  # every product-sized gradient first, then sum_to one by one
                size = node.new_bytes.get(name, self._tensor[name][1])
                key = self._new_storage(size, "grad:" + name + "#new") if size != node.out_bytes else fkey
                if key == fkey:
                    self._hold(key, "grad:" + name + "#new")
                self._release(fkey, f"tmp{i}:{name}")
                made.append((name, key))
            for name in wanted:
                kind = node.kinds.get(name, node.kind)
                if kind == VIEW:
                    self._hold(gkey, "grad:" + name + "#new")
                    made.append((name, gkey))
                elif kind == NEW:
                    size = node.new_bytes.get(name, self._tensor[name][1])
                    made.append((name, self._new_storage(size, "grad:" + name + "#new")))
                elif kind == CUMSUM:
                    a = self._new_storage(node.out_bytes, f"tmp{i}a")
                    b = self._new_storage(node.out_bytes, f"tmp{i}b")
                    made.append((name, self._new_storage(node.out_bytes, "grad:" + name + "#new")))
                    self._release(a, f"tmp{i}a")
                    self._release(b, f"tmp{i}b")
            if node.backward_ms is not None:
                self.backward_kernels.append(("fixed", node.backward_ms))
            elif node.gemm:  # grad_input and grad_weight
                self.backward_kernels += [("gemm", node.gemm), ("gemm", node.gemm)]
            elif node.kind != VIEW or len(made) != sum(k == gkey for _, k in made):
                broadcast = [n for n in muls if node.out_bytes > 2 * self._tensor[n][1]]
                # each full-size gradient of a broadcast product is itself a broadcast product (grad x other),
                # then sum_to reads it
                self.backward_kernels += [("broadcast", node.out_bytes)] * len(broadcast)
                moved = node.out_bytes * (1 + len(broadcast)) + sum(self._storage.get(k, 0) for k in node.saved)
                moved += sum(self._storage.get(k, 0) if n not in broadcast else 0 for n, k in made if k != gkey)
                moved += sum(node.out_bytes for n in muls if n not in broadcast)
                self.backward_kernels.append(("memory", moved))
            if node.transient:
                t = self._new_storage(node.transient, f"tmp{i}w")
                self._release(t, f"tmp{i}w")
            for pname, pbytes in node.extra:  # parameter gradients: AccumulateGrad keeps them
                self._new_storage(pbytes, "param:" + pname)
                self.param_grad_bytes += pbytes
            for k in node.saved:
                self._release(k, f"node{i}")
            self._release(gkey, "grad:" + node.out)
            for key in slots:
                self._release(key, "grad:" + node.out)
            for name, key in made:
                self._accumulate(name, key)

    def _wants(self, name: str) -> bool:
        return name in self._tensor and self._tensor[name][2]

    def _accumulate(self, name: str, key: str) -> None:
        if name in self._slotted and name in self._grad:  # another output's slot of a multi-output node
            self._hold(key, "grad:" + name)
            self._release(key, "grad:" + name + "#new")
            self._slots.setdefault(name, []).append(key)
            return
        old = self._grad.get(name)
        if old is None:
            self._hold(key, "grad:" + name)
            self._release(key, "grad:" + name + "#new")
            self._grad[name] = key
            return
        new = self._new_storage(self._tensor[name][1], "grad:" + name)  # old + new, out of place
        self._release(old, "grad:" + name)
        self._release(key, "grad:" + name + "#new")
        self._grad[name] = new
