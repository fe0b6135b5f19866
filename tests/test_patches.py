"""The patches of upstream libraries (pteforge/patches): each targets the version uv.lock
pins and the one installed, refuses loudly (UpstreamChangedError naming the patch, the
version expected and the one found) when its target changed, and puts back what it
replaced on exit."""

import contextlib
import re
from pathlib import Path

import pytest

from pteforge import patches
from pteforge.core.errors import ExitStatus, UpstreamChangedError
from pteforge.patches import coremltools_patches, executorch_patches, onnx2torch_patches, torch_patches, torchao_patches

ROOT = Path(__file__).resolve().parent.parent
MODULES = [torch_patches, executorch_patches, torchao_patches, coremltools_patches, onnx2torch_patches]


def _same(value):
    return value


def _targets() -> dict:
    """Each patch: (its module, what applies it, the (object, attribute) it replaces)."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
    from executorch.backends.xnnpack._passes.convert_to_sdpa import ConvertToSDPAPass
    from executorch.backends.xnnpack.partition.config.generic_node_configs import ViewCopyConfig
    from executorch.exir import lowered_backend_module
    from executorch.exir.backend import backend_api
    from executorch.exir.backend.canonical_partitioners.group_partitioner import GroupBasedPartitioner
    from executorch.exir.pass_base import _ExportPassBase
    from executorch.exir.program import _program
    from torch import _custom_class_base as custom_class_base
    from torch._export import utils as export_utils
    from torch._export.serde import serialize
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch._ops import OperatorBase
    from torch.export import ExportedProgram
    from torch.export.graph_signature import ExportGraphSignature
    from torch.fx.graph_module import GraphModule
    from torch.fx.traceback import NodeSource
    from torchao.quantization.pt2e.observer import HistogramObserver
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as intx

    from pteforge.backends.coreml import coremltools

    coremltools()
    from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipelineManager
    from executorch.backends.apple.coreai.compiler import preprocess as coreai_preprocess
    from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import FoldAndAnnotateQParamsPass
    from executorch.backends.arm._passes.rewrite_conv_pass import RewriteConvPass
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.backends.cortex_m.passes.activation_fusion_pass import ActivationFusionPass
    from executorch.backends.cortex_m.passes.matmul_to_bmm_pass import MatmulToBmmPass
    from executorch.backends.transforms.replace_scalar_with_tensor import ReplaceScalarWithTensorArgPass
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer
    from onnx2torch.onnx_graph import OnnxGraph

    t, e = torch_patches, executorch_patches
    return {
        "shared_provenance": (t, t.shared_provenance, (NodeSource, "__init__")),
        "lazy_codegen": (t, t.lazy_codegen, (GraphModule, "__new__")),
        "cached_quant_ops": (t, t.cached_quant_ops, (FakeTensorMode, "_validate_cache_key")),
        "fast_serde": (t, t.fast_serde, (serialize, "typing")),
        "cia_ops_materialized_once": (t, t.cia_ops_materialized_once, (export_utils, "_materialize_cpp_cia_ops")),
        "signature_maps_kept": (t, t.signature_maps_kept, (ExportGraphSignature, "inputs_to_buffers")),
        "py_kernels_registered_without_annotations": (t, t.py_kernels_registered_without_annotations,
                                                      (OperatorBase, "py_impl")),
        "custom_class_checks_by_type": (t, t.custom_class_checks_by_type,
                                        (custom_class_base.CustomClassBaseMeta, "__instancecheck__")),
        "run_decompositions_wrapped": (t, lambda: t.run_decompositions_wrapped(lambda f: lambda *a, **k: f(*a, **k)),
                                       (ExportedProgram, "run_decompositions")),
        "retrace_only_what_changed": (e, e.retrace_only_what_changed, (_ExportPassBase, "call")),
        "retraces_reuse_values": (e, e.retraces_reuse_values, (_ExportPassBase, "_fx")),
        "traced_arguments_read_directly": (e, e.traced_arguments_read_directly, (_ExportPassBase, "_fx")),
        "partitions_without_debug_text": (e, e.partitions_without_debug_text,
                                          (backend_api, "_create_partitions_in_graph_module")),
        "partitions_merged_by_set_checks": (e, e.partitions_merged_by_set_checks,
                                            (GroupBasedPartitioner, "_can_merge_partitions")),
        "partitions_sorted_in_place": (e, e.partitions_sorted_in_place, (lowered_backend_module, "legalize_graph")),
        "softmax_reads_nchw": (e, e.softmax_reads_nchw, (ChannelsLastTaggedReshapePass, "memory_sensitive_ops_nchw")),
        "one_value_constants_take_any_layout": (e, e.one_value_constants_take_any_layout,
                                                (ChannelsLastTaggedReshapePass, "input_to_nhwc")),
        "zero_dim_inputs_read_as_nchw": (e, e.zero_dim_inputs_read_as_nchw, (ChannelsLastTaggedReshapePass, "is_nhwc_node")),
        "views_of_written_buffers_outside": (e, e.views_of_written_buffers_outside, (ViewCopyConfig, "check_constraints")),
        "edge_program_wrapped": (e, lambda: e.edge_program_wrapped(lambda f: lambda *a, **k: f(*a, **k)),
                                 (_program, "_generate_edge_program")),
        "replacing ConvertToSDPAPass.call": (e, lambda: e.replaced_in_executorch(ConvertToSDPAPass, "call", _same),
                                             (ConvertToSDPAPass, "call")),
        "scale_only_hqq_replaced": (torchao_patches, lambda: torchao_patches.scale_only_hqq_replaced(_same),
                                    (intx, "_choose_qparams_and_quantize_scale_only_hqq")),
        "histogram_search_on_floats": (torchao_patches, torchao_patches.histogram_search_on_floats,
                                       (HistogramObserver, "_non_linear_param_search")),
        "pipeline_validated_where_scopes_are_checked": (
            coremltools_patches, coremltools_patches.pipeline_validated_where_scopes_are_checked,
            (PassPipelineManager, "apply_pipeline")),
        "matmuls_of_constants_left_alone": (e, e.matmuls_of_constants_left_alone, (MatmulToBmmPass, "call_operator")),
        "integer_arithmetic_keeps_its_scalars": (e, e.integer_arithmetic_keeps_its_scalars,
                                                 (xnnpack_quantizer, "_convert_scalars_to_attrs")),
        "scalar_ops_on_constants_left_alone": (e, e.scalar_ops_on_constants_left_alone,
                                               (ReplaceScalarWithTensorArgPass, "get_replacement")),
        "coreai_without_source_paths": (e, e.coreai_without_source_paths,
                                        (coreai_preprocess, "_convert_to_aiprogram")),
        "fused_activations_clamp_in_tosa": (e, e.fused_activations_clamp_in_tosa,
                                            (RewriteConvPass, "insert_output_rescale")),
        "boundary_quantizes_join_their_producer": (e, e.boundary_quantizes_join_their_producer,
                                                   (TOSAPartitioner, "_tag_module")),
        "activations_fuse_into_a_wider_range": (e, e.activations_fuse_into_a_wider_range,
                                                (ActivationFusionPass, "_get_validated_qparams")),
        "quantized_linears_read_by_matmuls": (e, e.quantized_linears_read_by_matmuls,
                                              (FoldAndAnnotateQParamsPass, "call")),
        "domains_in_module_names": (onnx2torch_patches, onnx2torch_patches.domains_in_module_names,
                                    (OnnxGraph, "generate_node_name")),
    }


PATCHES = ["shared_provenance", "lazy_codegen", "cached_quant_ops", "fast_serde", "run_decompositions_wrapped",
           "cia_ops_materialized_once", "custom_class_checks_by_type", "signature_maps_kept",
           "py_kernels_registered_without_annotations",
           "retrace_only_what_changed", "retraces_reuse_values", "traced_arguments_read_directly",
           "partitions_without_debug_text",
           "partitions_merged_by_set_checks", "partitions_sorted_in_place", "softmax_reads_nchw",
           "one_value_constants_take_any_layout", "zero_dim_inputs_read_as_nchw", "views_of_written_buffers_outside",
           "edge_program_wrapped",
           "replacing ConvertToSDPAPass.call", "scale_only_hqq_replaced", "pipeline_validated_where_scopes_are_checked",
           "domains_in_module_names", "matmuls_of_constants_left_alone", "integer_arithmetic_keeps_its_scalars",
           "scalar_ops_on_constants_left_alone", "coreai_without_source_paths", "fused_activations_clamp_in_tosa",
           "activations_fuse_into_a_wider_range", "boundary_quantizes_join_their_producer",
           "quantized_linears_read_by_matmuls", "histogram_search_on_floats"]


def _gone_custom_class_base():
    from torch import _custom_class_base

    return _custom_class_base, "CustomClassBase"


def _gone_lazy_codegen():
    from torch.fx._lazy_graph_module import _LazyGraphModule

    return _LazyGraphModule, "real_recompile"


# what the test of a target that is gone removes, where the attribute replaced is one every class has
GONE = {"shared_provenance": lambda: (torch_patches.fx_traceback, "NodeSource"), "lazy_codegen": _gone_lazy_codegen,
        "custom_class_checks_by_type": _gone_custom_class_base}


def _held(obj, attr):
    """What ``obj`` holds as ``attr``: a class's own entry (a staticmethod as it is), else the attribute."""
    return vars(obj).get(attr, getattr(obj, attr)) if isinstance(obj, type) else getattr(obj, attr)


def test_every_patch_is_tested():
    assert sorted(_targets()) == sorted(PATCHES)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rpartition(".")[2])
def test_each_module_targets_the_locked_and_installed_version(module):
    lock = (ROOT / "uv.lock").read_text()
    locked = re.search(rf'\nname = "{module.LIBRARY}"\nversion = "([^"]+)"', lock)
    assert locked and locked.group(1) == module.VERSION, f"uv.lock pins {module.LIBRARY} {locked and locked.group(1)}"
    assert patches.installed(module.LIBRARY) == module.VERSION
    assert f"{module.VERSION} (the version uv.lock pins)" in module.__doc__


@pytest.mark.parametrize("name", PATCHES)
def test_a_patch_puts_back_what_it_replaced(name):
    _, apply, (obj, attr) = _targets()[name]
    before = _held(obj, attr)
    own = not isinstance(obj, type) or attr in vars(obj)
    with apply():
        assert _held(obj, attr) is not before
    assert _held(obj, attr) is before
    assert own == (not isinstance(obj, type) or attr in vars(obj))


@pytest.mark.parametrize("name", PATCHES)
def test_a_patch_of_another_version_refuses(name, monkeypatch):
    module, apply, (obj, attr) = _targets()[name]
    before = _held(obj, attr)
    monkeypatch.setattr(module, "VERSION", "0.0.1")
    with pytest.raises(UpstreamChangedError) as caught:
        with apply():
            pass
    found = patches.installed(module.LIBRARY)
    assert f"patch {name} targets {module.LIBRARY} 0.0.1, found {module.LIBRARY} {found}" in str(caught.value)
    assert f"pteforge/patches/{module.__name__.rpartition('.')[2]}.py" in caught.value.fix
    assert "uv.lock" in caught.value.fix and caught.value.exit_status is ExitStatus.INTERNAL
    assert _held(obj, attr) is before


def test_an_installed_version_that_differs_is_named(monkeypatch):
    monkeypatch.setattr(patches, "installed", lambda library: "9.9.9")
    with pytest.raises(UpstreamChangedError, match=r"patch lazy_codegen targets torch 2\.14\.0, found torch 9\.9\.9"):
        with torch_patches.lazy_codegen():
            pass


@pytest.mark.parametrize("name", PATCHES)
def test_a_patch_whose_target_is_gone_refuses(name, monkeypatch):
    module, apply, (obj, attr) = _targets()[name]
    obj, attr = GONE.get(name, lambda: (obj, attr))()
    monkeypatch.delattr(obj, attr, raising=not isinstance(obj, type) or attr in vars(obj))
    if isinstance(obj, type):
        for base in obj.__mro__[1:]:  # inherited: gone from every class it came from
            if attr in vars(base) and base is not object and base is not type:
                monkeypatch.delattr(base, attr)
    assert not hasattr(obj, attr)
    with pytest.raises(UpstreamChangedError, match=rf"patch {re.escape(name)} targets .* without .*\.{attr}"):
        with apply():
            pass


@pytest.mark.parametrize("constant, what", [("_MERGE_SOURCE", "GroupBasedPartitioner._can_merge_partitions"),
                                            ("_LEGALIZE_SOURCE", "torch.fx.passes.tools_common.legalize_graph"),
                                            ("_PIPELINE_SOURCE", "PassPipelineManager.apply_pipeline"),
                                            ("_COREAI_CONVERT_SOURCE", "coreai preprocess._convert_to_aiprogram"),
                                            ("_FX_SOURCE", "_ExportPassBase._fx"),
                                            ("_PY_IMPL_SOURCE", "torch._ops.OperatorBase.py_impl"),
                                            ("_HISTOGRAM_SEARCH_SOURCE",
                                             "torchao HistogramObserver._non_linear_param_search")])
def test_a_patch_of_another_source_refuses(constant, what, monkeypatch):
    module, patch = {"_MERGE_SOURCE": (executorch_patches, executorch_patches.partitions_merged_by_set_checks),
                     "_LEGALIZE_SOURCE": (executorch_patches, executorch_patches.partitions_sorted_in_place),
                     "_COREAI_CONVERT_SOURCE": (executorch_patches, executorch_patches.coreai_without_source_paths),
                     "_FX_SOURCE": (executorch_patches, executorch_patches.traced_arguments_read_directly),
                     "_PY_IMPL_SOURCE": (torch_patches, torch_patches.py_kernels_registered_without_annotations),
                     "_HISTOGRAM_SEARCH_SOURCE": (torchao_patches, torchao_patches.histogram_search_on_floats),
                     "_PIPELINE_SOURCE": (coremltools_patches,
                                          coremltools_patches.pipeline_validated_where_scopes_are_checked)}[constant]
    real = getattr(module, constant)
    monkeypatch.setattr(module, constant, "deadbeef")
    with pytest.raises(UpstreamChangedError) as caught:
        with patch():
            pass
    message = str(caught.value)
    assert f"targets {what}" in message and "source digest deadbeef" in message and f"digest {real}" in message


def test_the_error_reads_as_one_line_with_its_fix(monkeypatch):
    monkeypatch.setattr(torchao_patches, "VERSION", "0.0.1")
    with pytest.raises(UpstreamChangedError) as caught:
        with torchao_patches.scale_only_hqq_replaced(_same):
            pass
    line = caught.value.one_line()
    assert line.startswith("patch scale_only_hqq_replaced targets torchao 0.0.1, found torchao 0.18.0")
    assert "(fix: pin torchao==0.0.1 in uv.lock, or update pteforge/patches/torchao_patches.py" in line


def test_replaced_removes_what_a_class_only_inherited():
    class Base:
        def f(self):
            return "base"

    class Child(Base):
        pass

    with patches.replaced(Child, "f", lambda self: "child"):
        assert Child().f() == "child"
    assert "f" not in vars(Child) and Child().f() == "base"
    with contextlib.suppress(RuntimeError), patches.replaced(Base, "f", lambda self: "patched"):
        raise RuntimeError
    assert Base().f() == "base"


def test_cia_operators_are_materialized_again_only_when_the_dispatchers_list_changes(monkeypatch):
    import torch
    from torch._export import utils as export_utils

    walks = []
    monkeypatch.setattr(export_utils, "_materialize_cpp_cia_ops", lambda: walks.append(1))
    with torch_patches.cia_ops_materialized_once():
        export_utils._materialize_cpp_cia_ops()
        export_utils._materialize_cpp_cia_ops()
        assert len(walks) == 1
        lib = torch.library.Library("pteforge_cia_test", "DEF")  # one more CIA operator in the dispatcher
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CompositeImplicitAutograd")
        export_utils._materialize_cpp_cia_ops()
        assert len(walks) == 2
        del lib


def test_custom_class_checks_answer_as_torch_does_and_again_once_a_library_registers_one():
    import enum

    import torch
    from torch._custom_class_base import CustomClassBase
    from torch._library import opaque_object
    from torch._library.fake_class_registry import FakeScriptObject

    class Later(CustomClassBase):  # registered as an opaque type while the patch is in place
        pass

    class Mode(enum.Enum):  # torch registers every Enum as an opaque constant type
        ON = 1

    graph = torch.fx.Graph()
    values = [3, 2.0, None, "s", (1, 2), graph.placeholder("x"), torch.float32, torch.ones(1), Mode.ON, Later()]
    plain = [isinstance(v, CustomClassBase) for v in values]
    assert plain[values.index(Mode.ON)] and not plain[-1]
    with torch_patches.custom_class_checks_by_type():
        assert [isinstance(v, CustomClassBase) for v in values] == plain
        assert [isinstance(v, CustomClassBase) for v in values] == plain  # remembered
        assert not isinstance(3, FakeScriptObject)
        opaque_object.register_custom_class(Later, typ="reference")
        try:
            assert isinstance(values[-1], CustomClassBase), "registered since: asked again"
            assert [isinstance(v, CustomClassBase) for v in values[:-1]] == plain[:-1]
        finally:
            name = next(k for k, info in opaque_object._OPAQUE_TYPES_BY_NAME.items()
                        if opaque_object._OPAQUE_TYPES.get(Later) is info)
            del opaque_object._OPAQUE_TYPES_BY_NAME[name], opaque_object._OPAQUE_TYPES[Later]


def test_run_decompositions_makes_the_same_program_with_cia_operators_materialized_once():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(torch.nn.functional.hardsigmoid(self.conv(x)).mean((2, 3)))

    program = torch.export.export(Net().eval(), (torch.randn(1, 3, 8, 8),))
    plain = program.run_decompositions().graph_module.code
    with torch_patches.cia_ops_materialized_once():
        assert program.run_decompositions().graph_module.code == plain
        assert program.run_decompositions().graph_module.code == plain


def test_the_mil_pipeline_makes_the_same_program_validating_it_where_scopes_are_checked(monkeypatch):
    """coremltools validates its MIL program after every pass (96 times for a convolution
    network); inside the patch only where it checks scopes and at the end, and the program
    converted is the same."""
    from pteforge.backends.coreml import coremltools

    ct = coremltools()
    from coremltools.converters.mil.mil import Program

    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Hardswish(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
    program = torch.export.export(model, (torch.rand(1, 3, 16, 16),)).run_decompositions({})
    original = Program.validate

    def converted() -> tuple[str, int]:
        calls = []
        monkeypatch.setattr(Program, "validate", lambda self, *a, **k: calls.append(k) or original(self, *a, **k))
        made = ct.convert(program, convert_to="mlprogram", skip_model_load=True,
                          minimum_deployment_target=ct.target.iOS16)
        monkeypatch.setattr(Program, "validate", original)
        return re.sub(r"block\d+", "block", str(made._mil_program)), len(calls)  # blocks numbered process-wide

    plain, validations = converted()
    with coremltools_patches.pipeline_validated_where_scopes_are_checked():
        patched, fewer = converted()
    assert patched == plain
    assert validations > 90 and fewer < validations / 4


def test_a_kept_signature_map_follows_every_change_to_the_specs():
    """``signature_maps_kept`` answers again from what it built while nothing changed, and
    builds anew after a rename, a new target, a spec removed or added; a signature still
    copies and pickles, and each copy answers for itself."""
    import copy
    import pickle

    import torch
    from torch.export.graph_signature import InputKind

    program = torch.export.export(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).eval(),
                                  (torch.rand(2, 3),))
    signature = program.graph_signature
    plain = (dict(signature.inputs_to_parameters), dict(signature.inputs_to_buffers), signature.user_inputs)
    with torch_patches.signature_maps_kept():
        assert (dict(signature.inputs_to_parameters), dict(signature.inputs_to_buffers), signature.user_inputs) == plain
        assert signature.inputs_to_parameters is signature.inputs_to_parameters
        spec = next(s for s in signature.input_specs if s.kind is InputKind.PARAMETER)
        spec.arg.name = "renamed"
        assert "renamed" in signature.inputs_to_parameters
        spec.target = "elsewhere"
        assert signature.inputs_to_parameters["renamed"] == "elsewhere"
        signature.input_specs.remove(spec)
        assert "renamed" not in signature.inputs_to_parameters
        signature.input_specs.insert(0, spec)
        assert "renamed" in signature.inputs_to_parameters
        twin = copy.deepcopy(signature)
        twin.input_specs[0].arg.name = "twin"
        assert "twin" in twin.inputs_to_parameters and "twin" not in signature.inputs_to_parameters
        assert dict(pickle.loads(pickle.dumps(signature)).inputs_to_parameters) == dict(signature.inputs_to_parameters)


class _Value:
    def __init__(self, n):
        self.n = n


def _trees():
    from collections import namedtuple

    import torch
    from hypothesis import strategies as st
    from torch.fx.immutable_collections import immutable_dict, immutable_list

    pair = namedtuple("pair", "a b")
    leaves = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.none(), st.booleans(),
                       st.sampled_from([torch.float32, torch.int8, torch.device("cpu")]),
                       st.integers().map(_Value), st.just(torch.Size([2, 3])))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple), st.lists(inner, max_size=3).map(immutable_list),
        st.dictionaries(st.text(max_size=2), inner, max_size=3),
        st.dictionaries(st.text(max_size=2), inner, max_size=3).map(immutable_dict),
        st.tuples(inner, inner).map(lambda t: pair(*t))), max_leaves=12)


def test_arguments_read_directly_are_what_the_tree_walk_reads():
    """``traced_arguments_read_directly`` maps a node's arguments as ``pytree.tree_map_only``
    does: the same values, in containers of the same types, for any nesting of tuples,
    lists, dicts, torch.fx's immutable ones, named tuples, sizes and plain values."""
    from hypothesis import given, settings
    from torch.utils import _pytree as pytree

    _, mapped = executorch_patches._argument_readers(_Value)

    def shape(tree):
        if isinstance(tree, (list, tuple)):
            return (type(tree), [shape(x) for x in tree])
        if isinstance(tree, dict):
            return (type(tree), [(k, shape(v)) for k, v in tree.items()])
        return (type(tree), tree)

    @settings(max_examples=200, deadline=None)
    @given(_trees())
    def same(tree):
        assert shape(mapped(tree, lambda v: v.n)) == shape(pytree.tree_map_only(_Value, lambda v: v.n, tree))

    same()


def test_the_histogram_searchs_bounds_turn_where_torchs_float32_comparison_turns():
    """``histogram_search_on_floats`` compares a float64 bound with the bounds ``_turns``
    makes of each float32 sum: the answer torch gives comparing the sum, a 0-dim float32
    tensor, with the Python float (rounded half to even), at every midpoint between two
    float32 values, the float64s beside it, and any float."""
    import numpy as np
    import torch
    from hypothesis import given, settings
    from hypothesis import strategies as st

    def same(s, ys):
        above, reached = torchao_patches._turns(np.float32([s]))
        t = torch.tensor([s], dtype=torch.float32)[0]
        for y in ys:
            assert bool(t < y) == (y >= above[0]) and bool(t > y) == (y < reached[0]), (s, y)

    def edges(s):
        s = np.float32(s)
        mids = [(float(s) + float(np.nextafter(s, np.float32(side)))) / 2 for side in (np.inf, -np.inf)]
        return [float(v) for m in (*mids, float(s)) for v in (m, np.nextafter(m, np.inf), np.nextafter(m, -np.inf))]

    for s in [0.0, 1.0, 3.0, 2.0**24, 2.0**24 + 2, 16777215.0, 1e-40, 123456.789]:  # ties to even either way
        same(np.float32(s), edges(s))

    @settings(max_examples=300, deadline=None)
    @given(st.floats(0, 2.0**100, width=32), st.floats(0, 2.0**101))
    def any_float(s, y):
        same(np.float32(s), [y, *edges(s)])

    any_float()
    assert torchao_patches._turns(np.float32([1.0, np.inf])) is None, "not finite: torchao's own search"


def test_the_histogram_search_gives_torchaos_ranges_and_quantized_programs_exactly():
    """The same (min, max) and quantization parameters as torchao's own search for
    activations of many shapes (outliers, constants, all zero, heavy tails, integers), and
    the same int8 program from XNNPACK's quantizer, which observes activations with
    histograms; torchao's method is back afterwards."""
    import copy

    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                          get_symmetric_quantization_config)
    from torchao.quantization.pt2e.observer import HistogramObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    shapes = [lambda n: torch.randn(n), lambda n: torch.relu(torch.randn(n)), lambda n: torch.randn(n) ** 3,
              lambda n: torch.cat([torch.randn(n), torch.tensor([50.0])]), lambda n: torch.randint(0, 5, (n,)).float(),
              lambda n: torch.zeros(n), lambda n: torch.full((n,), 3.0), lambda n: torch.randn(n) * 1e-6,
              lambda n: torch.distributions.Cauchy(0.0, 1.0).sample((n,)), lambda n: torch.exp(torch.randn(n) * 3)]
    original = HistogramObserver._non_linear_param_search
    for make in shapes:
        for kwargs in ({}, {"qscheme": torch.per_tensor_symmetric, "dtype": torch.qint8}, {"bins": 256}):
            observer = HistogramObserver(**kwargs)
            for n in (1, 700, 3000, 400_000):  # the last: quantile steps finer than a bin's count
                observer(make(n))
            theirs = (observer._non_linear_param_search(), observer.calculate_qparams())
            with torchao_patches.histogram_search_on_floats():
                assert HistogramObserver._non_linear_param_search is not original
                ours = (observer._non_linear_param_search(), observer.calculate_qparams())
            for mine, their in zip(ours, theirs):
                assert all(torch.equal(a, b) for a, b in zip(mine, their)), (kwargs, mine, their)
    assert HistogramObserver._non_linear_param_search is original

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3), torch.nn.Hardswish(),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 12 * 12, 10)).eval()
    x = (torch.randn(1, 3, 16, 16),)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(net, x).module(), quantizer)
    for _ in range(4):
        prepared(torch.randn(1, 3, 16, 16) * 4)
    assert any(isinstance(m, HistogramObserver) for m in prepared.modules()), "activations observed by histograms"
    theirs = convert_pt2e(copy.deepcopy(prepared))
    with torchao_patches.histogram_search_on_floats():
        ours = convert_pt2e(prepared)
    assert ours.code == theirs.code
    mine, their = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == their.keys() and all(torch.equal(mine[k], their[k]) for k in mine)
