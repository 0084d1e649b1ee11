"""Default CPU schedules, as DLight rules, for functions no tuning record covers.

TVM 0.27's DLight CPU rules cover GEMV and row reductions only, so an untuned conv net or
transformer runs naive scalar loops on one core (ResNet-50: ~4 s where PyTorch takes ~80 ms).
These rules match block *patterns*, not layer names, so they apply to any model. Each is a
class in its own module whose ``apply`` returns None when the rule does not apply; the first
rule that applies schedules the function:

``Winograd``      the input and output transforms of a Winograd convolution;
``ExpandWindow``  a 1x1 convolution computed band by band inside the window reduction it feeds;
``WindowProject`` a depthwise convolution (and its expansion) computed band by band inside the 1x1 projection;
``Attention``     a joined ``softmax(q @ k + mask) @ v``, a block of query rows per task;
``Amx``           bf16 contractions on AMX tiles (Intel CPUs with AMX, ``--precision bf16``);
``StreamingReduction`` a max, sum or mean over the outer axes of a tensor larger than L2, read in order;
``Contraction``   register-tiled reductions: matmul, batch matmul, convolution, pooling, means;
``Injective``     elementwise, broadcast, layout and padding loops, parallel and vectorised;
``RowReduction``  layer norm and softmax as per-row vector partial sums;
then DLight's own GEMV and Reduction rules, and last
``Fallback``      parallel outer loops for whatever is left.

The compile pipeline turns convolutions to NHWC/HWIO, packs weights per register tile and lifts
the weight transforms out of ``main`` (run once at load time), which is what makes convolutions
match ``Contraction``. Every rule runs behind one guard (``base.guarded``): a crash on a
half-matched function declines, leaving the function to the next rule.
"""

from __future__ import annotations

from typing import Any

from tvm.s_tir import dlight as dl

from tvmbench.compile.rules.amx import Amx
from tvmbench.compile.rules.attention import Attention
from tvmbench.compile.rules.base import Rule, guarded
from tvmbench.compile.rules.contraction import Contraction
from tvmbench.compile.rules.expand_window import ExpandWindow
from tvmbench.compile.rules.fallback import Fallback
from tvmbench.compile.rules.injective import Injective
from tvmbench.compile.rules.row_reduction import RowReduction
from tvmbench.compile.rules.streaming_reduction import StreamingReduction
from tvmbench.compile.rules.window_project import WindowProject
from tvmbench.compile.rules.winograd import Winograd

__all__ = ["Amx", "Attention", "Contraction", "ExpandWindow", "Fallback", "Injective", "RowReduction", "Rule", "StreamingReduction", "WindowProject",
           "Winograd",
           "default_rules", "guarded"]


def default_rules(kind: str) -> list[Any]:
    """The rules ``ApplyDefaultSchedule`` tries, in order, for a target kind, each guarded."""
    if kind == "cuda":
        rules = [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    else:
        rules = [Winograd(), ExpandWindow(), WindowProject(), Attention(), Amx(), StreamingReduction(), Contraction(), Injective(), RowReduction(),
                 dl.cpu.GEMV(), dl.cpu.Reduction(), Fallback()]
    return [guarded(r) for r in rules]
