"""A serving workload: one `Request` per row (arrival time, prompt tokens, output tokens), read from a CSV or drawn
from a synthetic generator. Pure Python (no numpy needed), deterministic for a given seed.

API (stable):

- `Request(request_id=, arrival_s=, prompt_tokens=, output_tokens=)`: one request. `output_tokens` counts every
  generated token, the first one (produced by the prefill) included, as `max_new_tokens` does.
- `Workload(requests=, source=)`: requests sorted by arrival; `.total_prompt_tokens`, `.total_output_tokens`,
  `.duration_s`, `.max_sequence_tokens`.
- `parse_workload_csv(text, source)`, `load_workload_csv(path)`: columns `arrival_s,prompt_tokens,output_tokens`
  (docs/contract.md §6), any column order, extra columns ignored, `#` comment lines skipped; arrivals must not go
  back in time. A bad cell is a ValueError naming the line and the column.
- `LengthDist` and `parse_length_dist(text, field)`: `512` or `fixed:512`; `uniform:LO:HI` (inclusive);
  `lognormal:MEDIAN:SIGMA` (the log of the length is normal with mean ln MEDIAN, standard deviation SIGMA),
  clipped to [1, MAX_TOKENS].
- `synthetic_workload(rate_per_s=, requests=, prompt_tokens=, output_tokens=, seed=)`: Poisson arrivals at
  `rate_per_s` requests per second (exponential gaps), or every request at t = 0 when the rate is `inf` (an
  offline batch). Same seed, same workload.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass

MAX_TOKENS = 1 << 24  # one request longer than 16.7 M tokens is a typo, not a workload
MAX_REQUESTS = 1_000_000
MAX_ARRIVAL_S = 365 * 24 * 3600.0  # a trace longer than a year is a unit mistake (ms given as s)
COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
DISTRIBUTIONS = ("fixed", "uniform", "lognormal")


def _check_tokens(field: str, value, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a whole number of tokens, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: expected a whole number of tokens, got {value!r}") from None
    if number != number or not number.is_integer():
        raise ValueError(f"{field}: expected a whole number of tokens, got {value!r}")
    if number < minimum or number > MAX_TOKENS:
        raise ValueError(f"{field}: {value!r} tokens is outside [{minimum}, {MAX_TOKENS:,}]")
    return int(number)


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request: it arrives at `arrival_s`, carries `prompt_tokens` and generates `output_tokens` (>= 1)."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        try:
            arrival = float(self.arrival_s)
        except (TypeError, ValueError):
            raise ValueError(f"arrival_s: expected seconds, got {self.arrival_s!r}") from None
        if not (0.0 <= arrival <= MAX_ARRIVAL_S):
            raise ValueError(f"arrival_s: {self.arrival_s!r} is outside [0, {MAX_ARRIVAL_S:.0f}] seconds")
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(self, "prompt_tokens", _check_tokens("prompt_tokens", self.prompt_tokens))
        object.__setattr__(self, "output_tokens", _check_tokens("output_tokens", self.output_tokens))

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True)
class Workload:
    """Requests in arrival order (ties keep their order). `source` says where they came from."""

    requests: tuple[Request, ...]
    source: str = ""

    def __post_init__(self) -> None:
        reqs = tuple(self.requests)
        if not reqs:
            raise ValueError("workload: no requests")
        if len(reqs) > MAX_REQUESTS:
            raise ValueError(f"workload: {len(reqs):,} requests is more than {MAX_REQUESTS:,}")
        for i in range(1, len(reqs)):
            if reqs[i].arrival_s < reqs[i - 1].arrival_s:
                raise ValueError(f"arrival_s: request {reqs[i].request_id} arrives at {reqs[i].arrival_s} s, before "
                                 f"the one listed above it ({reqs[i - 1].arrival_s} s); sort the rows by arrival")
        object.__setattr__(self, "requests", reqs)

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def total_prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def total_output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)

    @property
    def duration_s(self) -> float:
        """Time from the first arrival to the last."""
        return self.requests[-1].arrival_s - self.requests[0].arrival_s

    @property
    def max_sequence_tokens(self) -> int:
        return max(r.total_tokens for r in self.requests)

    def scaled(self, factor: float) -> Workload:
        """The same requests with every arrival time divided by `factor` (factor 2: twice the rate)."""
        if not factor > 0 or math.isinf(factor):
            raise ValueError(f"rate: scale factor must be a positive number, got {factor!r}")
        return Workload(requests=tuple(Request(request_id=r.request_id, arrival_s=r.arrival_s / factor,
                                               prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens)
                                       for r in self.requests), source=f"{self.source} (rate x{factor:g})")


def parse_workload_csv(text: str, source: str = "workload") -> Workload:
    """Requests from CSV text with the columns `arrival_s,prompt_tokens,output_tokens`. ValueError naming the line
    and the column on a bad cell."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{source}: empty; expected a header line {','.join(COLUMNS)} and one request per line")
    reader = csv.reader(io.StringIO("\n".join(lines)))
    header = [h.strip().lower() for h in next(reader)]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{source}: missing column(s) {', '.join(missing)}; the header must name "
                         f"{','.join(COLUMNS)}")
    index = {c: header.index(c) for c in COLUMNS}
    requests = []
    previous = 0.0
    for number, row in enumerate(reader, start=2):
        if len(row) < len(header):
            raise ValueError(f"{source} line {number}: {len(row)} cells, the header has {len(header)}")
        cells = {c: row[i].strip() for c, i in index.items()}
        try:
            req = Request(request_id=len(requests), arrival_s=cells["arrival_s"],
                          prompt_tokens=cells["prompt_tokens"], output_tokens=cells["output_tokens"])
        except ValueError as exc:
            raise ValueError(f"{source} line {number}: {exc}") from None
        if req.arrival_s < previous:
            raise ValueError(f"{source} line {number}: arrival_s {cells['arrival_s']} is earlier than the line "
                             f"above ({previous:g}); sort the rows by arrival")
        previous = req.arrival_s
        requests.append(req)
        if len(requests) > MAX_REQUESTS:
            raise ValueError(f"{source}: more than {MAX_REQUESTS:,} requests")
    if not requests:
        raise ValueError(f"{source}: a header but no requests")
    return Workload(requests=tuple(requests), source=source)


def load_workload_csv(path) -> Workload:
    """`parse_workload_csv` of a file (OSError if it cannot be read, ValueError if it is not text)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(64 << 20)
    except UnicodeDecodeError:
        raise ValueError(f"--workload: {path} is not a UTF-8 text file") from None
    return parse_workload_csv(text, source=str(path))


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    """A token-length distribution: fixed (a), uniform integers in [a, b], or lognormal (median a, sigma b)."""

    kind: str
    a: float
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in DISTRIBUTIONS:
            raise ValueError(f"length: unknown distribution {self.kind!r}; expected one of {', '.join(DISTRIBUTIONS)}")

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        value = math.exp(rng.gauss(math.log(self.a), self.b))
        return int(min(max(round(value), 1), MAX_TOKENS))

    @property
    def label(self) -> str:
        if self.kind == "fixed":
            return f"{int(self.a)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.a)}:{int(self.b)}"
        return f"lognormal:{self.a:g}:{self.b:g}"


def parse_length_dist(text, field: str) -> LengthDist:
    """`512`, `fixed:512`, `uniform:LO:HI` or `lognormal:MEDIAN:SIGMA`; ValueError naming `field` otherwise."""
    spelled = str(text).strip().lower()
    kind, _, rest = spelled.partition(":")
    if not rest:
        kind, rest = "fixed", spelled
    parts = rest.split(":")
    usage = f"{field}: expected N, fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA, got {text!r}"
    if kind == "fixed" and len(parts) == 1:
        return LengthDist(kind="fixed", a=_check_tokens(field, parts[0]))
    if kind == "uniform" and len(parts) == 2:
        lo, hi = _check_tokens(field, parts[0]), _check_tokens(field, parts[1])
        if lo > hi:
            raise ValueError(f"{field}: uniform:{lo}:{hi} has LO above HI")
        return LengthDist(kind="uniform", a=lo, b=hi)
    if kind == "lognormal" and len(parts) == 2:
        median = _check_tokens(field, parts[0])
        try:
            sigma = float(parts[1])
        except ValueError:
            raise ValueError(usage) from None
        if not 0 <= sigma <= 5:
            raise ValueError(f"{field}: lognormal sigma {parts[1]} is outside [0, 5]")
        return LengthDist(kind="lognormal", a=median, b=sigma)
    raise ValueError(usage)


def parse_rate(value, field: str = "rate") -> float:
    """Requests per second: a positive number, or `inf` (every request at t = 0)."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: expected requests per second (a positive number or inf), got {value!r}") from None
    if rate != rate or rate <= 0:
        raise ValueError(f"{field}: expected requests per second above 0 (or inf for an offline batch), "
                         f"got {value!r}")
    if not math.isinf(rate) and rate > 1e6:
        raise ValueError(f"{field}: {value!r} requests per second is absurd (over a million)")
    return rate


def synthetic_workload(*, rate_per_s, requests, prompt_tokens, output_tokens, seed=0) -> Workload:
    """`requests` requests with Poisson arrivals at `rate_per_s` (inf: all at t = 0) and lengths drawn from the
    two distributions (LengthDist or their spelling). Deterministic for a given `seed`."""
    rate = parse_rate(rate_per_s)
    try:
        count = int(float(requests))
    except (TypeError, ValueError):
        raise ValueError(f"requests: expected a positive whole number, got {requests!r}") from None
    if float(requests) != count or not 1 <= count <= MAX_REQUESTS:
        raise ValueError(f"requests: expected a whole number in [1, {MAX_REQUESTS:,}], got {requests!r}")
    prompt = prompt_tokens if isinstance(prompt_tokens, LengthDist) else parse_length_dist(prompt_tokens,
                                                                                         "prompt_tokens")
    output = output_tokens if isinstance(output_tokens, LengthDist) else parse_length_dist(output_tokens,
                                                                                         "output_tokens")
    try:
        seed_value = int(seed)
    except (TypeError, ValueError):
        raise ValueError(f"seed: expected an integer, got {seed!r}") from None
    rng = random.Random(seed_value)
    t = 0.0
    out = []
    for i in range(count):
        if i and not math.isinf(rate):
            t += rng.expovariate(rate)
        out.append(Request(request_id=i, arrival_s=min(t, MAX_ARRIVAL_S), prompt_tokens=prompt.sample(rng),
                           output_tokens=output.sample(rng)))
    label = "offline batch" if math.isinf(rate) else f"Poisson {rate:g}/s"
    return Workload(requests=tuple(out), source=f"synthetic: {count} requests, {label}, prompt {prompt.label}, "
                                                f"output {output.label}, seed {seed_value}")
