"""Core ML's quantizer builds only the pattern graphs that may match the program it
annotates (pteforge/backends/toolkit/patterns.py: built_only_where_they_can_match), and annotates
as ExecuTorch's own does."""

import dataclasses
import json
import sys

import pytest
import torch
import torch.nn.functional as F

from pteforge.backends import default_registry
from pteforge.backends.base import Backend
from pteforge.core.spec import Precision
from pteforge.backends.toolkit import patterns
from pteforge.stages.quantize import quantize

pytest.importorskip("coremltools")

# Enough of the quantizer's ~20 annotators to hold patterns that match this net and many
# that do not (linear with each activation, the binary ops); all of them are 405 patterns.
SOME = ("linear_act", "linear", "add", "mul", "conv")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.conv(x)
        y = (y + x.mean(1, keepdim=True)) * y
        return F.hardtanh(self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1)))


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """Only ``SOME`` annotators, a cache directory of the test's own, and a count of the
    pattern graphs really built."""
    from executorch.backends.apple.coreml.quantizer import _coreml_quantizer as upstream
    from executorch.backends.apple.coreml.quantizer import _coreml_quantizer_utils as utils

    every = upstream._AnnotationPatternRegistry.get_annotators()
    monkeypatch.setattr(upstream._AnnotationPatternRegistry, "get_annotators",
                        classmethod(lambda cls: {name: every[name] for name in SOME}))
    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path))
    built = []
    real = utils._get_aten_graph_module

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(utils, "_get_aten_graph_module", counting)
    return built


@pytest.mark.parametrize("precision", [Precision.INT8, Precision.INT8_WEIGHT])
def test_the_program_is_quantized_as_by_executorch_s_own_quantizer(builds, precision):
    coreml = default_registry().get("coreml")
    torch.manual_seed(0)
    example = (torch.rand(1, 3, 8, 8),)
    program = torch.export.export(Net().eval(), example)
    batches = [(torch.rand(1, 3, 8, 8),) for _ in range(3)]
    plan = coreml.plan(precision)
    own = Backend.plan(coreml, precision).quantizer  # ExecuTorch's, as it comes

    ours = quantize(program, plan, batches, example)
    ours_built = len(builds)
    theirs = quantize(program, dataclasses.replace(plan, quantizer=own), batches, example)
    theirs_built = len(builds) - ours_built

    assert type(own).__name__ == "CoreMLQuantizer" and isinstance(plan.quantizer, type(own))
    assert ours.graph_module.code == theirs.graph_module.code
    assert any("quantize_per_tensor" in str(n.target) or "quantize_per_channel" in str(n.target)
               for n in ours.graph.nodes), "something was quantized"
    for mine, other in ((ours.state_dict, theirs.state_dict), (dict(ours.constants), dict(theirs.constants))):
        assert mine.keys() == other.keys()
        assert all(torch.equal(mine[k], other[k]) for k in mine if isinstance(mine[k], torch.Tensor))
    assert theirs_built >= 30, theirs_built
    assert 0 < ours_built <= theirs_built // 4, (ours_built, theirs_built)
    from executorch.backends.apple.coreml.quantizer import _coreml_quantizer_utils as utils

    assert not patterns.keyed_path(utils).exists(), "every pattern's operators were shipped: none learned"


def test_patterns_not_known_yet_are_built_once_then_only_where_they_can_match(builds, monkeypatch):
    """On versions pteforge ships no table for, the first annotation builds every pattern
    and keeps their operators; a damaged table is learned again, never taken as known."""
    from executorch.backends.apple.coreml.quantizer import _coreml_quantizer as upstream
    from executorch.backends.apple.coreml.quantizer import _coreml_quantizer_utils as utils

    monkeypatch.setattr(patterns, "_shipped", lambda: {})
    some = upstream._AnnotationPatternRegistry.get_annotators()
    monkeypatch.setattr(upstream._AnnotationPatternRegistry, "get_annotators",
                        classmethod(lambda cls: {name: some[name] for name in ("linear_act", "conv")}))
    quantizer = default_registry().get("coreml").plan(Precision.INT8).quantizer
    program = torch.export.export(Net().eval(), (torch.rand(1, 3, 8, 8),)).module()

    def annotated() -> int:
        before = len(builds)
        quantizer.annotate(program)
        return len(builds) - before

    every = annotated()
    path = patterns.keyed_path(utils)
    kept = patterns._keyed(patterns._read(path))
    assert len(kept) == every >= 20 and all(op.startswith("aten.") for ops in kept.values() for op in ops)
    needed = annotated()
    assert 0 < needed < every // 4, (needed, every)
    path.write_text(path.read_text()[:-20])
    assert annotated() == every, "a truncated table: learned again"
    assert annotated() == needed
    for damaged in ("[]", '{"a": 3}', '{"a": []}', '{"a": [1]}', "3"):
        assert patterns._keyed(json.loads(damaged)) == {}, damaged


def test_a_pattern_that_cannot_match_gets_a_graph_that_matches_nothing():
    from torch.fx.passes.utils.matcher_with_name_node_map_utils import SubgraphMatcherWithNameNodeMap

    program = torch.export.export(Net().eval(), (torch.rand(1, 3, 8, 8),)).module()
    assert SubgraphMatcherWithNameNodeMap(patterns.never_matching(), ignore_literals=True).match(program.graph) == []


def test_a_pattern_is_keyed_by_what_its_graph_is_made_from():
    from executorch.backends.apple.coreml.quantizer import _coreml_quantizer_utils as utils

    keys = patterns.pattern_keys(utils, "_get_aten_graph_module", lambda: (
        utils.get_linear_pattern(F.relu, True), utils.get_linear_pattern(F.relu, False),
        utils.get_linear_pattern(F.relu6, True), utils.get_conv_pattern(1, F.relu, True),
        utils.get_conv_pattern(2, F.relu, True), utils.get_binary_op_act_pattern(torch.add, None),
        utils.get_linear_pattern(F.relu, True)))
    assert len(keys) == 6, "each differs in a function, a flag or a shape; the last is the first again"

    class Weighted(torch.nn.Module):  # not in the module whose source keys the table
        def forward(self, x):
            return x

    assert patterns.pattern_key(utils, Weighted(), (torch.rand(1),)) is None


def made_with(fn, how: str):
    """A pattern whose graph depends on ``fn``, given to it as a class attribute, a default
    argument or a closure."""

    class Attribute(torch.nn.Module):
        act = fn

        def forward(self, x):
            return self.act(x)

    class Default(torch.nn.Module):
        def forward(self, x, act=fn):
            return act(x)

    class Closure(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    return {"attribute": Attribute, "default": Default, "closure": Closure}[how]()


@pytest.mark.parametrize("how", ["attribute", "default", "closure"])
def test_a_pattern_s_key_holds_every_value_its_graph_depends_on(how):
    here = sys.modules[__name__]
    x = (torch.rand(2),)
    relu, gelu = patterns.pattern_key(here, made_with(F.relu, how), x), patterns.pattern_key(here, made_with(F.gelu, how), x)
    assert None not in (relu, gelu) and relu != gelu
    assert relu == patterns.pattern_key(here, made_with(F.relu, how), x)
    assert relu != patterns.pattern_key(here, made_with(F.relu, how), (torch.rand(3),)), "another shape"
    stateful = made_with(F.relu, how)
    stateful.scale = 2.0
    assert patterns.pattern_key(here, stateful, x) is None, "state of its own: built"
