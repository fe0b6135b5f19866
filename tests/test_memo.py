"""Steps shared inside one worker (pteforge/stages/memo.py): a result is reused only for
the same program (source, code, metadata, tensors) and the same call."""

import zlib

import pytest
import torch
from tiny_models import TinyNet

from pteforge.backends.toolkit import patterns
from pteforge.core.spec import Precision
from pteforge.stages import memo
from pteforge.stages.lower import lower


@pytest.fixture
def unshipped(monkeypatch):
    """As on versions pteforge ships no pattern operators for: they are learned."""
    monkeypatch.setattr(patterns, "_shipped", lambda: {})


def exported():
    torch.manual_seed(0)
    return torch.export.export(TinyNet().eval(), (torch.rand(1, 3, 8, 8),))


def test_the_same_call_on_the_same_program_is_done_once():
    program = memo.tag(exported(), "test same")
    with memo.sharing():
        before = memo.stats.copy()
        first = program.run_decompositions({})
        again = program.run_decompositions({})
        assert memo.stats["decompose hit"] == before["decompose hit"] + 1
    assert first is not again and again.graph_module.code == first.graph_module.code
    assert memo.source_of(again) == "test same", "what is made from a tagged program may be shared too"
    for made in (first, again):  # a pass writing into the metadata of its own program, in place
        next(n for n in made.graph.nodes if n.op == "call_function").meta["nn_module_stack"]["changed"] = True
    with memo.sharing():
        third = program.run_decompositions({})
    assert all("changed" not in n.meta.get("nn_module_stack", {}) for n in third.graph.nodes), "copies share nothing"


def test_another_program_or_call_is_not_shared():
    program = memo.tag(exported(), "test other")
    with memo.sharing():
        program.run_decompositions({})
        hits = memo.stats["decompose hit"]
        program.run_decompositions()  # the default table: another call
        with torch.no_grad():
            next(iter(program.state_dict.values())).add_(1.0)  # a weight changed in place
        program.run_decompositions({})
        memo.tag(exported(), "test elsewhere").run_decompositions({})  # the same graph from another source
        untagged = memo.stats.copy()
        exported().run_decompositions({})
        assert memo.stats == untagged, "an untagged program takes no part"
    assert memo.stats["decompose hit"] == hits


def test_the_empty_table_on_what_run_decompositions_made_gives_it_back_untraced():
    """ExecuTorch functionalizes every program it lowers (``run_decompositions({})``); on
    what ``run_decompositions`` made, unchanged since, that is the program itself. After
    a change in place, it is traced again."""
    program = memo.tag(exported(), "test again")
    with memo.sharing():
        decomposed = program.run_decompositions()
        before = memo.stats["decompose again"]
        again = decomposed.run_decompositions({})
        assert memo.stats["decompose again"] == before + 1
        assert again is not decomposed and memo.source_of(again) == "test again"
        relu = next(n for n in decomposed.graph.nodes if n.target == torch.ops.aten.relu.default)
        relu.target = torch.ops.aten.relu_.default  # a pass changing the graph in place
        traced = decomposed.run_decompositions({})
        assert memo.stats["decompose again"] == before + 1
    assert torch.ops.aten.relu_.default not in {n.target for n in traced.graph.nodes}, "functionalized again"
    relu.target = torch.ops.aten.relu.default
    assert again.graph_module.code == decomposed.run_decompositions({}).graph_module.code, "what tracing gives"
    x = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(again.module()(x), program.module()(x))


def test_a_table_naming_none_of_its_operators_gives_back_what_run_decompositions_made():
    """ExecuTorch decomposes again with its whole table after swapping the operators a
    partitioner keeps whole for their stand-ins: on what ``run_decompositions`` made, when
    the table names none of its operators, that is the program itself. A table naming one
    of them is traced."""
    from executorch.exir.program._program import (
        _default_decomposition_table,
        _register_no_decomp_op,
        aten_op_to_transform_op,
    )

    aten = torch.ops.aten
    program = memo.tag(exported(), "test table")
    with memo.sharing():
        decomposed = program.run_decompositions()
    _register_no_decomp_op(aten.relu.default)  # as ExecuTorch swaps an operator kept whole
    relu = next(n for n in decomposed.graph.nodes if n.target == aten.relu.default)
    relu.target = aten_op_to_transform_op[aten.relu.default]
    truth = decomposed.run_decompositions(_default_decomposition_table())  # outside: traced
    addmm = torch._decomp.get_decompositions([aten.addmm.default])
    with memo.sharing():
        before = memo.stats["decompose again"]
        again = decomposed.run_decompositions(_default_decomposition_table())
        assert memo.stats["decompose again"] == before + 1
        traced = decomposed.run_decompositions(addmm)
        assert memo.stats["decompose again"] == before + 1
    assert again is not decomposed and again.graph_module.code == truth.graph_module.code
    assert aten.addmm.default not in {n.target for n in traced.graph.nodes}, "decomposed"
    x = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(again.module()(x), program.module()(x))


def test_a_program_with_symbolic_sizes_is_given_back_untraced_too_in_its_own_shape_environment():
    """A language model's program reads its sequence length with ``sym_size``, which the
    default table names: ExecuTorch's two re-traces of what ``run_decompositions`` made gave
    it back as it was, and took 28 % of a 4-layer Gemma 3's lowering. They are skipped;
    the copy keeps the shape environment (as tracing would), and is never kept for others."""
    from executorch.exir.program._program import _default_decomposition_table
    from torch._guards import detect_fake_mode

    class Rows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor([0.5]))

        def forward(self, x):
            return torch.nn.functional.softmax(x.transpose(1, 2), dim=-1).sum(1, keepdim=True) * x.shape[1] * self.scale

    def mode(program):
        return detect_fake_mode([n.meta["val"] for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)])

    seq = torch.export.Dim("seq", min=2, max=64)
    model = Rows()
    program = memo.tag(torch.export.export(model, (torch.rand(1, 5, 4),), dynamic_shapes=({1: seq},)), "test sym")
    with memo.sharing():
        decomposed = program.run_decompositions()
        assert any(n.target == torch.ops.aten.sym_size.int for n in decomposed.graph.nodes)
        truth = decomposed.run_decompositions.__wrapped__(decomposed, _default_decomposition_table())
        before = memo.stats.copy()
        again = decomposed.run_decompositions({})
        again_whole = again.run_decompositions(_default_decomposition_table())
        assert memo.stats["decompose again"] == before["decompose again"] + 2
        assert memo.stats["keep refused"] == before["keep refused"], "the symbolic programs were not offered to keep"
    assert again is not decomposed and again_whole is not again
    assert all(again.state_dict[k] is v for k, v in decomposed.state_dict.items()) and decomposed.state_dict, \
        "the weights shared, as run_decompositions shares them"
    assert again_whole.graph_module.code == truth.graph_module.code
    assert mode(again_whole) is mode(decomposed), "symbols stay in the shape environment they belong to"
    for length in (3, 17):
        x = torch.rand(1, length, 4)
        torch.testing.assert_close(again_whole.module()(x), model(x))


def test_programs_holding_other_objects_have_no_key():
    from executorch.exir import to_edge_transform_and_lower
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    lowered = to_edge_transform_and_lower(exported(), partitioner=[XnnpackPartitioner()]).exported_program()
    assert memo.program_key(memo.tag(lowered, "test delegate")) is None, "a delegate is not described"
    assert memo.program_key(memo.tag(exported(), "test plain")) is not None


def test_a_program_with_tensor_subclass_weights_is_not_shared_and_still_lowers():
    """torchao's int4 weights (Core ML's int4-weight) are tensor subclasses: not described
    here, so not shared, and their lowering is not disturbed."""
    from tiny_models import weighty

    from pteforge.core.spec import Precision
    from pteforge.stages.capture import transformed_capture

    example = (torch.rand(1, 3, 16, 16),)
    program = memo.tag(transformed_capture(weighty().eval(), "coreml", Precision("int4-weight"), example), "test int4")
    assert memo.program_key(program) is None
    with memo.sharing():
        assert program.run_decompositions({}) is not None


def test_a_capture_file_is_read_once_per_worker_and_each_job_gets_its_own_copy(tmp_path):
    from pteforge.stages.pipeline import _file_identity

    path = tmp_path / "capture.pt2"
    torch.export.save(exported(), path)
    source = _file_identity(path)
    before = memo.stats.copy()
    first, again = memo.load(path, source), memo.load(path, source)
    assert (memo.stats["load miss"], memo.stats["load hit"]) == (before["load miss"] + 1, before["load hit"] + 1)
    assert first is not again and again.graph_module.code == first.graph_module.code
    assert memo.source_of(again) == source
    with torch.no_grad():
        next(iter(first.state_dict.values())).add_(1.0)  # a job changing its program in place
    third = memo.load(path, source)
    assert torch.equal(next(iter(third.state_dict.values())), next(iter(again.state_dict.values())))
    torch.export.save(exported(), path)  # the file written again: another identity, read again
    memo.load(path, _file_identity(path))
    assert memo.stats["load miss"] == before["load miss"] + 2


def test_vulkan_makes_its_pattern_graphs_once_per_process(monkeypatch, tmp_path, unshipped):
    """ExecuTorch 1.5.1 registers the Vulkan RoPE pattern functions before their lru_cache
    wraps them: the partitioner and the fusion pass each made them again, every lowering."""
    from executorch.backends.vulkan.patterns import fusable_patterns

    from pteforge.backends import default_registry

    made = []
    for name, entry in fusable_patterns.items():
        if entry.get_graphs_fn is not None:
            fn = getattr(entry.get_graphs_fn, "__wrapped__", entry.get_graphs_fn)
            monkeypatch.setattr(entry, "get_graphs_fn", lambda fn=fn, name=name: made.append(name) or fn())
    vulkan = default_registry().get("vulkan")
    for _ in range(2):
        program = lower(exported(), [vulkan], vulkan.default_precision, vulkan.plan(vulkan.default_precision)).to_executorch()
        assert program.buffer
    assert made and sorted(made) == sorted(set(made)), f"each pattern made once, not {made}"


class Upsample(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.interpolate(self.conv(x), scale_factor=2, mode="bilinear", align_corners=False)


@pytest.mark.slow
def test_xnnpack_makes_its_pattern_graphs_only_for_a_program_that_may_hold_one(monkeypatch, tmp_path, unshipped):
    """XNNPACK's bilinear and attention patterns (~2 s in each process) are made once on a
    machine to learn their operators (kept in the cache directory); after that a program
    without those operators is lowered without them, to the same bytes, and one with them
    still gets its pattern converted."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
    from executorch.devtools.backend_debug import get_delegation_info

    from pteforge.backends import default_registry

    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path))
    xnnpack = default_registry().get("xnnpack")
    plan = xnnpack.plan(Precision.FP32)
    makers = (bilinear_2d._get_bilinear_2d_graphs, sdpa.get_graphs)

    def lowered(make_model, shape):
        for make in makers:
            make.cache_clear()
        torch.manual_seed(0)
        program = torch.export.export(make_model().eval(), (torch.rand(*shape),))
        edge = lower(program, [xnnpack], Precision.FP32, plan)
        return edge, edge.to_executorch().buffer, [make.cache_info().currsize for make in makers]

    _, first, made = lowered(TinyNet, (1, 3, 8, 8))
    assert made == [1, 1] and len(list((tmp_path / "patterns").glob("*.json"))) == 2, "made, and their operators kept"
    _, again, made = lowered(TinyNet, (1, 3, 8, 8))
    assert made == [0, 0] and again == first
    edge, _, made = lowered(Upsample, (1, 3, 8, 8))
    assert made[0] == 1
    info = get_delegation_info(edge.exported_program().graph_module)
    assert info.num_delegated_subgraphs == 1 and not any(
        n.non_delegated for op, n in info.delegation_by_operator.items() if op != "getitem"), "the upsampling inside XNNPACK"


def test_vulkan_makes_its_rope_patterns_only_for_a_program_that_may_hold_one(monkeypatch, tmp_path, unshipped):
    """As XNNPACK's: after the patterns' operators are known (kept in the cache directory),
    a program without them is lowered without making them, to the same bytes, and the RoPE
    module the pattern comes from still has it made (and matched by the partitioner)."""
    import functools

    from executorch.backends.vulkan.patterns import fusable_patterns
    from executorch.backends.vulkan.patterns.rope import RotaryEmbeddingPattern

    from pteforge.backends import default_registry

    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path))
    made = []
    for name, entry in fusable_patterns.items():
        if entry.get_graphs_fn is not None:
            fn = getattr(entry.get_graphs_fn, "__wrapped__", entry.get_graphs_fn)
            monkeypatch.setattr(entry, "get_graphs_fn", functools.cache(lambda fn=fn, name=name: made.append(name) or fn()))
    vulkan = default_registry().get("vulkan")

    def lowered(program):
        for entry in fusable_patterns.values():
            if entry.get_graphs_fn is not None:
                entry.get_graphs_fn.cache_clear()
        made.clear()
        return lower(program, [vulkan], vulkan.default_precision, vulkan.plan(vulkan.default_precision)).to_executorch().buffer

    first = lowered(exported())
    assert sorted(made) == ["export_llama_rope", "hf_rope"], "made once, to learn their operators"
    assert lowered(exported()) == first and made == []
    rope = torch.export.export(RotaryEmbeddingPattern(), (torch.randn(1, 1, 4, 32), torch.randn(1, 1, 2, 32),
                                                          torch.randn(1, 16), torch.randn(1, 16)))
    lowered(rope)
    assert "export_llama_rope" in made and "hf_rope" not in made


def test_a_damaged_record_of_pattern_operators_is_learned_again(monkeypatch, tmp_path, unshipped):
    """A truncated or rewritten file must never make a pattern look impossible."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    from pteforge.backends.toolkit import patterns

    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path))
    build = lambda: list(bilinear_2d.get_graphs_dict())  # noqa: E731
    learned = patterns.needed(bilinear_2d, build)
    assert learned and all("aten.upsample_bilinear2d.vec" in ops for ops in learned)
    [path] = (tmp_path / "patterns").glob("*.json")
    for damaged in ('["x"]', '{"a": 1}', "[[", "[]", '[["a", 3]]'):
        path.write_text(damaged)
        assert patterns.needed(bilinear_2d, build) == learned, damaged
    assert patterns.can_match(torch.fx.symbolic_trace(torch.nn.ReLU()), None, build), "no module to key by: made"


@pytest.mark.slow
def test_the_pattern_operators_pteforge_ships_are_those_of_the_installed_executorch(monkeypatch, tmp_path):
    """pteforge/data/patterns.json holds, for the versions it is locked to, what a first run
    would learn: so that run makes no pattern graph, on a program without them and with an
    empty cache directory, and still converts a pattern where one is."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
    from executorch.devtools.backend_debug import get_delegation_info

    from pteforge.backends import default_registry

    made = patterns.make_table(keyed=lambda key: zlib.crc32(key.encode()) % 40 == 0)  # ~1 in 40 of Core ML's 405
    shipped = patterns._shipped()
    missing = sorted(set(made) - set(shipped))
    assert not missing, (f"pteforge/data/patterns.json has no entry for {missing} (another ExecuTorch or torch?): "
                         "python -m pteforge.backends.toolkit.patterns > pteforge/data/patterns.json")
    for name, ops in made.items():
        if isinstance(ops, dict):  # every pattern Core ML's quantizer asks for is shipped; those built, as shipped
            assert set(ops) <= set(shipped[name]), sorted(set(ops) - set(shipped[name]))[:3]
            assert all(shipped[name][key] == o for key, o in ops.items() if o is not None)
            assert sum(o is not None for o in ops.values()) >= 5
        else:
            assert sorted(map(sorted, shipped[name])) == sorted(ops), name

    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path))
    for make in (bilinear_2d._get_bilinear_2d_graphs, sdpa.get_graphs):
        make.cache_clear()
    registry = default_registry()
    for name in ("xnnpack", "vulkan"):
        backend = registry.get(name)
        program = torch.export.export(TinyNet().eval(), (torch.rand(1, 3, 8, 8),))
        assert lower(program, [backend], Precision.FP32, backend.plan(Precision.FP32)).to_executorch().buffer
    assert [m.cache_info().currsize for m in (bilinear_2d._get_bilinear_2d_graphs, sdpa.get_graphs)] == [0, 0]
    assert not (tmp_path / "patterns").exists(), "nothing learned: it was shipped"
    upsample = torch.export.export(Upsample().eval(), (torch.rand(1, 3, 8, 8),))
    xnnpack = registry.get("xnnpack")
    edge = lower(upsample, [xnnpack], Precision.FP32, xnnpack.plan(Precision.FP32))
    info = get_delegation_info(edge.exported_program().graph_module)
    assert info.num_delegated_subgraphs == 1 and not any(
        n.non_delegated for op, n in info.delegation_by_operator.items() if op != "getitem"), "the upsampling inside XNNPACK"


class RoundsBothWays(torch.nn.Module):
    """Vulkan leaves floor and ceil to the next backend of the chain."""

    def forward(self, x):
        return torch.floor(x) + torch.ceil(x)


@pytest.mark.slow
def test_a_backend_later_in_the_chain_makes_its_patterns_only_where_they_can_match_too(monkeypatch, tmp_path, unshipped):
    """vulkan+xnnpack: what Vulkan leaves goes to XNNPACK, whose passes run inside the
    lowering Vulkan drives; WebGPU lowers with Vulkan's partitioner."""
    from executorch.backends.vulkan.patterns import fusable_patterns
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    from pteforge.backends import default_registry

    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path))
    registry = default_registry()
    program = torch.export.export(RoundsBothWays(), (torch.randn(1, 3, 8, 8),))
    made = []
    for chain in (["vulkan", "xnnpack"], ["vulkan", "xnnpack"], ["webgpu"]):
        bilinear_2d._get_bilinear_2d_graphs.cache_clear()
        for entry in fusable_patterns.values():
            if hasattr(entry.get_graphs_fn, "cache_clear"):
                entry.get_graphs_fn.cache_clear()
        backends = [registry.get(name) for name in chain]
        edge = lower(program, backends, Precision.FP32, backends[0].plan(Precision.FP32))
        assert edge.to_executorch().buffer
        made.append(bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize + sum(
            entry.get_graphs_fn.cache_info().currsize for entry in fusable_patterns.values() if entry.get_graphs_fn is not None))
    assert made[0] == 3, "XNNPACK's (a dict of them) and Vulkan's two sets, made once to learn their operators"
    assert made[1:] == [0, 0], made


@pytest.mark.slow
def test_each_copy_traces_in_a_shape_environment_of_its_own(tmp_path):
    """Copies of one program shared their values' fake mode, and so its shape environment,
    where tracing records guards: after the Arm quantizer had traced a transformer (its
    attention mask), a later job's ``run_decompositions`` on another copy of the capture
    failed ("name '__meta_utils_unknown_tensor35' is not defined"). Each copy has its own."""
    from tiny_models import vit
    from torch._guards import detect_fake_mode

    from pteforge.backends import default_registry
    from pteforge.stages.pipeline import _file_identity
    from pteforge.stages.quantize import quantize

    def mode(program):
        return detect_fake_mode([n.meta["val"] for n in program.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)])

    example = (torch.rand(1, 3, 32, 32),)
    path = tmp_path / "vit.pt2"
    torch.export.save(torch.export.export(vit().eval(), example), path)
    source = _file_identity(path)
    first = memo.load(path, source)
    tosa = default_registry().get("tosa")
    quantize(tosa.prepare(first, Precision.INT8, example), tosa.plan(Precision.INT8), [example], example)
    again = memo.load(path, source)
    assert mode(again) is not mode(first) and mode(again).shape_env is not mode(first).shape_env
    with memo.sharing():
        decomposed = again.run_decompositions({})
    torch.testing.assert_close(decomposed.module()(*example), vit().eval()(*example))


def test_saving_and_loading_with_fast_serde_make_the_same_files_and_programs(tmp_path):
    """``torch.export.save`` and ``load`` with ``fast_serde`` give what they give without: two
    programs with symbolic sizes of their own (one with a size read from a value) saved to
    the same bytes, and loaded one after the other in one context with the same code,
    signature, ranges and every node's value; torch's serializer is put back after."""
    import copy
    import typing

    import sympy
    from torch._export.serde import serialize

    from pteforge.patches.torch_patches import fast_serde

    class Cache(torch.nn.Module):
        def forward(self, x, n):
            k = n.item()
            torch._check(k >= 1)
            torch._check(k <= 4)
            return (x * 2).sum(0)[:k] + x.shape[0]

    class Pair(torch.nn.Module):
        def forward(self, x, y):
            return torch.cat([x, y]).mean(0, keepdim=True).expand(x.shape[0] + 1, -1)

    files = []
    for i, (model, example, shapes) in enumerate([
            (Cache(), (torch.rand(5, 6), torch.tensor([2])), ({0: torch.export.Dim("rows", min=2, max=9)}, None)),
            (Pair(), (torch.rand(3, 4), torch.rand(2, 4)),
             ({0: torch.export.Dim("a", min=2, max=8)}, {0: torch.export.Dim("b", min=2, max=8)}))]):
        files.append(tmp_path / f"p{i}.pt2")
        program = torch.export.export(model, example, dynamic_shapes=shapes)
        torch.export.save(program, str(files[-1]))
        (tmp_path / "fast").mkdir(exist_ok=True)
        with fast_serde():
            torch.export.save(program, str(tmp_path / "fast" / files[-1].name))
        assert (tmp_path / "fast" / files[-1].name).read_bytes() == files[-1].read_bytes()

    def described(program):
        return (program.graph_module.code, str(program.graph_signature), str(program.range_constraints),
                [(n.name, str(n.meta.get("val"))) for n in program.graph.nodes])

    plain = [described(torch.export.load(str(f))) for f in files]
    with fast_serde():
        kept = [described(torch.export.load(str(f))) for f in files]
        again = described(torch.export.load(str(files[0])))
    assert kept == plain and again == plain[0]
    assert "u0: VR[1, 4]" in plain[0][2] and ("slice_1", "FakeTensor(..., size=(u0,))") in plain[0][3]
    assert serialize.typing is typing and serialize.sympy is sympy and serialize.copy is copy


class MobileBlock(torch.nn.Module):
    """What mobilenet_v3 is made of, small: the operators ExecuTorch's table decomposes
    (conv2d, batch norm, hard-sigmoid, adaptive pooling, linear) among ones it keeps."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.squeeze, self.fc = torch.nn.Conv2d(8, 8, 1), torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.bn(self.conv(x)), inplace=True)
        scale = torch.nn.functional.hardsigmoid(self.squeeze(torch.nn.functional.adaptive_avg_pool2d(y, 1)))
        y = torch.nn.functional.relu(y * scale, inplace=True)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)), y.max(dim=1)[0]


# MobileBlock for XNNPACK took 157 s of a CI run outside the pipeline's patches: TinyNet there
@pytest.mark.parametrize("make, backend_name", [(TinyNet, "xnnpack"), (MobileBlock, "vulkan"), (MobileBlock, "portable"),
                                               (TinyNet, "mlx")])
def test_a_lowering_decomposes_only_what_the_table_takes_and_makes_the_same_program(make, backend_name):
    """Inside ``sharing``, ExecuTorch's decomposition of a functionalized program with its
    table is traced only where the table takes an op (``toolkit/splice.py``): the program
    lowered is the very one tracing it whole makes, byte for byte."""
    from pteforge.backends import default_registry

    backend = default_registry().get(backend_name)
    torch.manual_seed(0)
    model, x = make().eval(), torch.rand(1, 3, 8, 8)

    def lowered():
        program = torch.export.export(model, (x,))
        return lower(program, [backend], backend.default_precision, backend.plan(backend.default_precision))

    whole = lowered().to_executorch().buffer
    with memo.sharing():
        before = memo.stats["decompose spliced"]
        spliced = lowered().to_executorch().buffer
        assert memo.stats["decompose spliced"] > before, "spliced, not traced whole"
    assert spliced == whole


def test_a_program_whose_inputs_are_not_named_as_its_signature_says_is_traced_whole():
    """ExecuTorch hands ``run_decompositions`` programs whose placeholder ``input`` a graph
    copy renamed ``input_1`` while the signature still says ``input``: tracing the whole
    goes by position; a splice (``toolkit/splice.py``) would make a program torch's verifier
    refuses, so none is made, and a placeholder named ``input`` keeps its name."""
    from executorch.exir.tracer import _default_decomposition_table

    from pteforge.backends.toolkit.splice import spliced

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, input):  # noqa: A002 - the name that shadows a builtin
            return torch.nn.functional.hardsigmoid(self.fc(input))

    functional = torch.export.export(Named().eval(), (torch.rand(1, 4),)).run_decompositions({})
    made = spliced(functional, _default_decomposition_table(), ask=False)
    assert made is not None and [n.name for n in made.graph.nodes if n.op == "placeholder"][-1] == "input"
    next(n for n in functional.graph.nodes if n.name == "input").name = "input_1"
    assert spliced(functional, _default_decomposition_table(), ask=False) is None


def test_a_kept_program_comes_back_with_its_nodes_named_as_its_signature_names_them():
    """A graph copy names no node after a builtin: ``nn.Sequential``'s ``forward(self, input)``
    came back from ``kept`` as ``input_1``, the signature still saying ``input``, and MLX's
    partitioner refused the program ("Support for placeholder input_1 is not implemented")
    when a worker handed it to its third job (XNNPACK, Core AI, then MLX). The copy names
    every node as the original does, and MLX lowers it."""
    from pteforge.backends import default_registry

    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval(), torch.rand(1, 3, 8, 8)
    program = memo.tag(torch.export.export(model, (x,)), "test names")
    assert "input" in [n.name for n in program.graph.nodes]
    memo.keep("test names", program)
    copy = memo.kept("test names")
    assert [n.name for n in copy.graph.nodes] == [n.name for n in program.graph.nodes]
    placeholders = [n.name for n in copy.graph.nodes if n.op == "placeholder"]
    assert placeholders == [spec.arg.name for spec in copy.graph_signature.input_specs]
    assert torch.equal(copy.module()(x), model(x))
    mlx = default_registry().get("mlx")
    edge = lower(copy, [mlx], mlx.default_precision, mlx.plan(mlx.default_precision))
    assert any(n.op == "get_attr" and n.target.startswith("lowered_module") for n in edge.exported_program().graph.nodes)
