"""All-reduce (sum) bandwidth over message sizes, defined as nccl-tests does.

For each size (elements of the precision's dtype): ``--warmup`` untimed
all-reduces, then ``--iters`` timed ones. The time is nccl-tests' (its common.cu:
each rank's timed loop over the iterations, divided by the iterations, then
``Allreduce(&deltaSec, average)``, its default ``-a 1``): each rank's summed timed
time / iterations, averaged over ranks. That is total work over total time per rank,
as every other rate in orch, except that nccl-tests averages the ranks where the other
workloads take each step's slowest rank. algbw = bytes / time, busbw = algbw *
2(n-1)/n, the figure to compare with a link's peak (it is what each rank's link
carries in a ring). Backends: gloo on cpu, nccl (RCCL) on cuda, xccl/ccl on xpu, hccl
on hpu. One rank alone is allowed (busbw 0: nothing crosses a link).

Figures (study C.4; definitions in ``db/glossary_metrics.yaml``): ``busbw_gbs`` (also
``bandwidth_gbs``) and ``algbw_gbs`` at the largest size, ``message_bytes`` its size,
``bus_factor`` = 2(n-1)/n, ``link_utilization`` = busbw_gbs / --peak-link-gbs, and per
size S ``busbw_gbs_S``, ``algbw_gbs_S``, ``time_s_S`` (S in elements). The metrics
file's step times (and ``timed_time_s``) are the largest size's, slowest rank per step.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Sequence

import torch
import torch.distributed as torch_dist

from workloads import flops
from workloads.harness import Refused, Session, run_workload

_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3}


def parse_sizes(text: str) -> list[int]:
    """``"1024,64k,64500000"`` -> element counts (k/M/G are powers of 1024)."""
    sizes = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        mult = _SUFFIX.get(item[-1], 1)
        number = item[:-1] if item[-1] in _SUFFIX else item
        try:
            sizes.append(int(float(number) * mult))
        except ValueError:
            raise Refused(f"bad message size {item!r} in --sizes") from None
    if not sizes or min(sizes) < 1:
        raise Refused(f"--sizes needs positive element counts, got {text!r}")
    return sizes


def body(session: Session) -> None:
    args = session.args
    session.ensure_process_group()
    sizes = parse_sizes(args.sizes)
    dev, dtype, n = session.device.torch_device, session.precision.dtype, session.world_size
    rows: list[dict[str, Any]] = []
    last_times: list[float] = []
    for size in sorted(sizes):
        buf = torch.full((size,), float(session.rank + 1), device=dev, dtype=dtype)
        if args.check:
            torch_dist.all_reduce(buf)
            expected = n * (n + 1) / 2  # sum of rank+1 over ranks
            got = float(buf[0].float().item()), float(buf[-1].float().item())
            if any(abs(v - expected) > 1e-2 * expected for v in got):
                raise RuntimeError(f"all-reduce of {size} elements gave {got}, expected {expected}")
        session.barrier()
        own = session.time_steps(partial(torch_dist.all_reduce, buf))
        times = session.slowest_steps(own)
        per_rank = session.gather(math.fsum(own) / len(own))  # nccl-tests: each rank's mean ...
        mean = sum(per_rank) / len(per_rank)  # ... averaged over ranks
        nbytes = size * buf.element_size()
        algbw, busbw = flops.allreduce_bandwidths(nbytes, mean, n)
        rows.append({"elements": size, "bytes": nbytes, "time_s": mean, "algbw_gbs": algbw / 1e9,
                     "busbw_gbs": busbw / 1e9})
        session.log(f"{size:>12} elements {nbytes:>12} B  {mean * 1e6:10.1f} us  "
                    f"algbw {algbw / 1e9:8.3f} GB/s  busbw {busbw / 1e9:8.3f} GB/s")
        last_times = times
        del buf
    top = rows[-1]
    results: dict[str, Any] = {
        "bandwidth_gbs": top["busbw_gbs"],
        "busbw_gbs": top["busbw_gbs"],
        "algbw_gbs": top["algbw_gbs"],
        "message_bytes": top["bytes"],
        "bus_factor": flops.allreduce_bus_factor(n),
        "link_utilization": top["busbw_gbs"] / args.peak_link_gbs if args.peak_link_gbs > 0 else None,
    }
    for row in rows:  # one column per size, for SQL without JSON parsing
        results[f"busbw_gbs_{row['elements']}"] = row["busbw_gbs"]
        results[f"algbw_gbs_{row['elements']}"] = row["algbw_gbs"]
        results[f"time_s_{row['elements']}"] = row["time_s"]
    session.finish(results, last_times, already_gathered=True, timing_extra={"sizes": rows})


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("allreduce", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
