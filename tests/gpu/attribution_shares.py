"""Share of training kernel time charged to a forward-op line, from raw GPU captures.

    python tests/gpu/attribution_shares.py w/train_torch.kpgcap.gz w/train_torch_nobwd.kpgcap.gz

Replays each capture through the current receiver (``capture.replay``) and prints, per file,
the kernel time attributed to the line that launched it or, for backward kernels, to their
forward op (``own_line_share``), through the main-thread fallback (``via_main_share``), and
through autograd sequence numbers (``via_backward_share``) and, for JAX captures with their
HLO dump beside them (``NAME.xla/``), through the dumped HLO ops (``via_xla_share``).
"""

from __future__ import annotations

import json
import os
import sys

from kubeprof.agent.gpu.capture import replay
from kubeprof.analysis.gpu_attribution import attribution

for path in sys.argv[1:]:
    # A JAX capture's HLO modules, where recorded beside it (`NAME.xla/`), join XLA kernels.
    xla = path.removesuffix(".kpgcap.gz") + ".xla"
    att = attribution(
        replay(path, xla_dump_dir=xla if os.path.isdir(xla) else None).batch.gpu_activities
    )
    print(
        json.dumps(
            {
                "capture": path.rsplit("/", 1)[-1],
                "kernels": att.count,
                "kernel_ms": round(att.total_ns / 1e6, 2),
                "attributed_share": round(att.share, 4),
                "own_line_share": round(att.own_line_share, 4),
                "via_main_share": round(att.via_main_share, 4),
                "via_backward_share": round(att.via_backward_share, 4),
                "via_xla_share": round(att.via_xla_share, 4),
            }
        ),
        flush=True,
    )
