"""The XNNPACK rewrites compute the same values and leave nothing on the portable kernels."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pteforge.spec import Precision
from pteforge.stages.rewrite import xnnpack_friendly


class Patterns(torch.nn.Module):
    """One of each op the rewrites target, in the shapes YOLO and attention blocks use."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.anchors = torch.nn.Parameter(torch.randn(2, 64), requires_grad=False)

    def forward(self, x):
        y = self.conv(x)  # 1x16x8x8
        a, b = y.split((6, 10), 1)
        c, d = b.chunk(2, 1)
        bins = a.reshape(1, 6, 4, 16).softmax(1)  # DFL-style: over a non-last dim
        up = self.up(c)  # 1x5x16x16
        q = d.reshape(1, 5, 4, 16)
        attn = (q.transpose(-2, -1) @ q).softmax(-1)  # batched matmul
        return (
            bins,
            up,
            (attn @ q.transpose(-2, -1)).flatten(1),
            self.anchors.unsqueeze(0) - y.flatten(2)[:, :2],
        )


def _lowered(program, lower=None):
    """The lowered edge program, its XNNPACK subgraph count and the ops left outside."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.exir import to_edge_transform_and_lower

    edge = lower(program) if lower else to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    info = get_delegation_info(edge.exported_program().graph_module)
    outside = {op for op, n in info.delegation_by_operator.items() if n.non_delegated and op != "getitem"}
    return edge, info.num_delegated_subgraphs, outside


def test_rewritten_program_matches_and_lowers_whole():
    torch.manual_seed(0)
    model = Patterns().eval()
    x = torch.randn(1, 8, 8, 8)
    exported = torch.export.export(model, (x,))
    rewritten = xnnpack_friendly(exported)

    targets = {str(n.target) for n in rewritten.graph.nodes}
    assert not {"aten.split_with_sizes.default", "aten.chunk.default", "aten.upsample_nearest2d.vec", "aten.matmul.default"} & targets
    for want, got in zip(model(x), rewritten.module()(x)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)

    _, before_subgraphs, before_outside = _lowered(exported)
    edge, after_subgraphs, after_outside = _lowered(rewritten)
    # the rewrite is what moves them: without it each one is left outside
    assert {"aten__softmax_default", "aten_upsample_nearest2d_vec", "aten_expand_copy_default"} <= before_outside
    assert before_subgraphs > 1
    assert after_subgraphs == 1 and not after_outside

    from executorch.runtime import Runtime

    program = Runtime.get().load_program(edge.to_executorch().buffer)  # the method needs it alive
    method = program.load_method("forward")
    for want, got in zip(model(x), method.execute([x])):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [(12, 12), (16, 24)])
def test_upsample_other_scales_and_non_integer_left_alone(size):
    class Up(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, size=size, mode="nearest")

    x = torch.randn(1, 3, 8, 8)
    rewritten = xnnpack_friendly(torch.export.export(Up(), (x,)))
    integer = size[0] % 8 == 0 and size[1] % 8 == 0
    assert ("aten.upsample_nearest2d.vec" in {str(n.target) for n in rewritten.graph.nodes}) is not integer
    torch.testing.assert_close(rewritten.module()(x), Up()(x), rtol=0, atol=0)


def test_xnnpack_plan_folds_casts_of_constants():
    """hardswish lifts its scalars as int64 tensors cast at run time; the plan folds them."""
    from pteforge.backends import default_registry

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Hardswish(), torch.nn.Conv2d(8, 4, 1), torch.nn.Hardsigmoid())
    x = torch.randn(1, 3, 8, 8)
    xnnpack = default_registry().get("xnnpack")
    plan = xnnpack.plan(Precision.FP32)
    exported = torch.export.export(model.eval(), (x,))

    def lowered(plan):
        return _lowered(exported, lambda program: xnnpack.lower(program, plan, []))

    _, _, unfolded = lowered(dataclasses.replace(plan, transform_passes=[]))
    assert "dim_order_ops__to_dim_order_copy_default" in unfolded  # the casts the pass is for
    edge, _, folded = lowered(plan)
    assert not folded

    from executorch.runtime import Runtime

    program = Runtime.get().load_program(edge.to_executorch().buffer)
    [got] = program.load_method("forward").execute([x])
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)


def test_programs_with_symbolic_sizes_are_left_as_they_are():
    class Attn(torch.nn.Module):
        def forward(self, q):
            return (q @ q.transpose(-2, -1)).softmax(1)

    q = torch.randn(2, 3, 8, 4)
    batch = torch.export.Dim("batch", min=1, max=8)
    exported = torch.export.export(Attn(), (q,), dynamic_shapes={"q": {0: batch}})
    assert xnnpack_friendly(exported) is exported
    static = xnnpack_friendly(torch.export.export(Attn(), (q,)))
    assert "aten.matmul.default" not in {str(n.target) for n in static.graph.nodes}
