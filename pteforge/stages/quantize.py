"""Reduced precision of a captured program: PT2E quantization with calibration, and fp16."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from ..core.errors import ModelError
from ..core.spec import ExportConfig, JobConfig, ModelSpec, Precision
from ..core.system import one_thread
from ..families import model_input
from ..families.vision import image_views, images_in, shipped_images, takes_images
from ..models.synthetic import make_inputs
from ..models.weights import own_buffers, put_back
from . import memo
from .capture import in_place_writes, written_inputs
from .describe import Unstable, describe


def calibration_set(spec: ModelSpec, config: ExportConfig | JobConfig, precision: Precision | None = None) -> tuple[list[tuple], dict]:
    """``config.calibration_samples`` input tuples and what they were.

    Image models get real photos through the model's own preprocessing: the images
    in ``--calibration DIR`` (sorted, the first N), or by default seeded random views
    of the photos our dependencies ship (random weights or real, a real network's
    activations are what int8 must cover: noise spreads them wider than photos do). The
    rest, and every sample of other models, are seeded synthetic inputs, whose seeds lie
    far from the verification inputs'. Input files in ``--calibration DIR`` (``samples``:
    ``.npy``/``.npz``, any model) are taken as they are, and alone (``samples.split``).
    Synthetic token ids (``samples.token_ids``) are no text: where static int8
    (``precision``) calibrates its activations' ranges on them, the facts say so (``note``).
    """
    from ..core import samples

    n = max(config.calibration_samples, 1)
    batches: list[tuple] = []
    facts: dict = {"samples": n}
    if samples.holds_samples(config.calibration_dir):
        batches = [samples.load(p, spec) for p in samples.split(config)[0]]
        facts.update(source=f"--calibration {config.calibration_dir}", files=len(batches), samples=len(batches))
        return batches, {**facts, "images": 0, "synthetic": 0}
    elif takes_images(spec):
        if config.calibration_dir:
            paths = images_in(Path(config.calibration_dir), n)
            batches = [(model_input(p, spec),) for p in paths]
            facts["source"] = f"--calibration {config.calibration_dir}"
        else:
            photos = shipped_images()
            want = n
            views = [v for i, p in enumerate(photos) for v in image_views(p, -(-want // len(photos)), config.seed + i)] if photos else []
            batches = [(model_input(v, spec),) for v in views[:want]]
            facts["source"] = "views of the photos dependencies ship (" + ", ".join(p.name for p in photos) + ")"
    else:
        facts["source"] = "seeded synthetic"
    facts["images"] = len(batches)
    synthetic = n - len(batches)
    batches += [make_inputs(spec, 10_000 + config.seed * 997 + i) for i in range(synthetic)]
    facts["synthetic"] = synthetic
    ids = samples.token_ids(spec)
    if synthetic and ids and precision is Precision.INT8:  # ids drawn at random: no sentence's
        facts.update(tokenIds=ids, note=samples.TOKEN_IDS_NOTE)
    return batches, facts


def quantize(exported, plan, batches: list[tuple], example: tuple):
    """prepare_pt2e → calibrate → convert_pt2e (or the backend's own flow) → torch.export again."""
    return quantize_shared(exported, plan, batches, example, None)[0]


def quantize_shared(exported, plan, batches: list[tuple], example: tuple, shared: Path | None):
    """``quantize``, once per prepared program: (the quantized program, its fingerprint or None).

    ``shared``: a directory every target of this model's run sees. A target whose
    quantizer prepares a program already quantized there (same ``fingerprint``) loads
    it instead of calibrating and converting again, or takes it from this worker's
    memory (``memo.kept``) when this worker made or loaded it; one that quantizes saves
    its result there. Nothing waits: two targets preparing the same program side by side each
    quantize it (waiting would leave a core idle for as long as quantizing takes).
    Either way the program is the same (tested: the same .pte bytes).

    ``module(check_guards=False)``: under torch 2.13 the Arm quantizer fails on the
    guard nodes that ``module()`` inserts.
    """
    with one_thread():  # the calibration's numbers, whatever this job's share of the cores
        return _quantize_shared(exported, plan, batches, example, shared)


def _quantize_shared(exported, plan, batches: list[tuple], example: tuple, shared: Path | None):
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from ..patches.executorch_patches import integer_arithmetic_keeps_its_scalars

    module = exported.module(check_guards=False)
    if plan.quantize is not None:
        with torch.no_grad():
            return torch.export.export(plan.quantize(module, batches), example), None
    if written_inputs(exported, "BUFFER") or any(value is not whole for value, whole in in_place_writes(exported)):
        # torchao's constant folding (convert_pt2e) takes a buffer updated in place
        # (``add_``) for a constant and freezes what is computed from it: a counting
        # model's int8 program added the same count on every call. In functional form
        # the update is a ``copy_`` into the buffer, which it leaves alone. And a write
        # into a view (``y[:, :2].add_(1)``) reaches the tensor it is part of only while
        # nothing stands between them: once quantize/dequantize pairs do, it wrote into a
        # copy (int8 programs at -2 dB from eager); functional, it is a ``slice_scatter``.
        module = exported.run_decompositions({}).module(check_guards=False)
    if plan.for_quantizer is not None:
        module = plan.for_quantizer(module, example)
    _own_biases(module)
    state = own_buffers(module)  # the model's own, before the observers' join them
    with integer_arithmetic_keeps_its_scalars():
        prepared = prepare_pt2e(module, plan.quantizer)
    key = fingerprint(prepared, batches) if shared is not None else None
    path = shared / f"{key}.pt2" if key and shared is not None else None  # key: made where shared is
    source = f"quantized {key}" if key else None
    if source is not None:
        quantized = memo.kept(source)  # this worker quantized it for another target
        if quantized is None and path is not None and path.is_file():  # path: where source is
            quantized = torch.export.load(str(path))
            memo.keep(source, quantized)
        if quantized is not None:
            return memo.tag(quantized, source), key
    with torch.no_grad():
        for batch in batches if records_activations(prepared) else batches[:1]:
            prepared(*batch)
    converted = convert_pt2e(prepared)
    put_back(converted, state)  # calibration ran the model, and so did convert_pt2e (once)
    quantized = memo.tag(torch.export.export(converted, example), source)
    if source is not None:
        memo.keep(source, quantized)
    if path is not None:
        from filelock import FileLock, Timeout

        from ..core.io import write_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(path) + ".lock", blocking=False):  # the other one is saving the same program
                if not path.is_file():
                    buffer = io.BytesIO()
                    torch.export.save(quantized, buffer)
                    write_atomic(path, buffer.getvalue())
        except Timeout:
            pass
    return quantized, key


def records_activations(prepared) -> bool:
    """Whether calibrating ``prepared`` on more inputs can change what it converts to: some
    observer records values that depend on the input.

    Dynamic int8 scales its activations at run time (their observers are placeholders) and
    leaves only the weights to observe. An observer that records nothing, or a min/max
    observer of a constant (a weight, or what is computed from weights alone), holds the
    same state after one call as after sixteen: calibrating such a program on one input
    makes the same program as on ``--calibration-samples`` of them (the same .pte bytes,
    ``tests/test_precision.py``), in a sixteenth of the forward passes. Any other observer
    (a histogram's, a user's subclass) calibrates on every input."""
    from torchao.quantization.pt2e import observer

    record_nothing = (observer.PlaceholderObserver, observer.NoopObserver, observer.ReuseInputObserver,
                      observer.FixedQParamsObserver)
    # min/max, or a moving average of it: the same value again leaves them as they are
    same_again = (observer.MinMaxObserver, observer.PerChannelMinMaxObserver, observer.MovingAverageMinMaxObserver,
                  observer.MovingAveragePerChannelMinMaxObserver)
    constant: set = set()  # nodes whose value is the same on every call
    for node in prepared.graph.nodes:
        inputs = node.all_input_nodes
        of_constants = bool(inputs) and all(a in constant for a in inputs)  # none: a call_function may draw at random
        if node.op == "get_attr" or (node.op in ("call_function", "call_module") and of_constants):
            constant.add(node)  # an observer passes its input on
        if node.op != "call_module":
            continue
        kind = type(prepared.get_submodule(node.target))
        if kind in record_nothing or (kind in same_again and of_constants):
            continue
        if issubclass(kind, observer.ObserverBase) or kind.__name__.endswith(("Observer", "FakeQuantize")):
            return True
    return False


_BIASED = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear",
           "convolution")


def _own_biases(module) -> None:
    """Give each use of a layer applied more than once (``self.conv(self.conv(x))``) its
    own copy of the bias. An int8 bias is quantized at the input's scale times the
    weight's, and one bias shared by two calls took one call's input scale: XNNPACK then
    refused the program (``xnn_status_invalid_parameter``), or a shared linear came out
    at 4 dB from eager. Weights stay shared; a bias is a few bytes per channel."""
    import torch

    graph = module.graph
    for node in [n for n in graph.nodes if n.op == "get_attr"]:
        uses = [u for u in node.users if u.op == "call_function" and len(u.args) > 2 and u.args[2] is node
                and getattr(u.target, "__name__", "").split(".")[0] in _BIASED]
        for k, user in enumerate(uses[1:], 1):
            name = f"{node.target.replace('.', '_')}_use{k}"
            value = torch.fx.graph_module._get_attr(module, node.target)
            module.register_buffer(name, value.detach().clone())
            with graph.inserting_before(user):
                copy = graph.get_attr(name)
            copy.meta = dict(node.meta)
            user.replace_input_with(node, copy)
    graph.lint()
    module.recompile()


class NothingQuantized(ModelError):
    """A quantizer that took none of the model's operators: the row fails rather than ship
    an fp32 program under an integer precision's name."""

    plain = True  # its message names the cause itself (core.errors.one_line)


def _calls(exported):
    """Every operator call of the program, its branches' too."""
    return (node for module in exported.graph_module.modules() if hasattr(module, "graph")
            for node in module.graph.nodes if node.op == "call_function")


def unset_scales(exported) -> str | None:
    """How a quantized program's activations get their scales where calibration does not set
    them: None where it does (a quantize at a fixed scale, ``quantize_per_tensor.default``:
    static int8's); "scaled at run time" where the program computes them (``choose_qparams``:
    dynamic int8); "kept in floating point" where only the weights are quantized."""
    targets = [str(node.target) for node in _calls(exported)]
    if any(t.split(".")[-2:] == ["quantize_per_tensor", "default"] for t in targets):
        return None
    return "scaled at run time" if any("choose_qparams" in t for t in targets) else "kept in floating point"


def quantizes_nothing(exported) -> bool:
    """Whether a quantized program has no quantize operator at all: the quantizer took none
    of the model's operators (an LSTM and an embedding for XNNPACK's), so the program
    computes in fp32 whatever its precision says."""
    return not any("quantize" in str(node.target) for node in _calls(exported))


# the operators that carry a model's weights and most of its work: what quantizing is for
_WEIGHTED = ("aten.conv", "aten._convolution", "aten.linear", "aten.matmul", "aten.mm.",
             "aten.bmm", "aten.addmm")


def quantized_share(exported) -> dict:
    """How many of the program's weighted operators (convolutions, linears, matmuls) a
    quantizer took, reading values a dequantize makes, of how many: a quantizer that leaves
    most of them in fp32 (an operator it has no pattern for, a layout it does not take)
    makes a program whose precision is mostly not the one it is named by."""
    weighted = [node for node in _calls(exported) if any(w in str(node.target) for w in _WEIGHTED)]
    taken = sum(any(a.op == "call_function" and "dequantize" in str(a.target) for a in node.all_input_nodes)
                for node in weighted)
    return {"quantized": taken, "weighted": len(weighted)}



def fingerprint(prepared, batches: list[tuple]) -> str | None:
    """What calibrating and converting ``prepared`` depends on, hashed: its graph code,
    every tensor in it (weights, observer state) and every observer's configuration
    (dtype, range, scheme, derived-qparams functions by name, code and closure), plus
    the calibration inputs. Equal fingerprints give the same quantized program; a value
    that cannot be described stably (an object known only by its address) gives None,
    and that target quantizes on its own.

    On mobilenet_v3_small the TOSA, Ethos-U55 and Ethos-U85 quantizers prepare the same
    program (their specs differ in features the model does not use), Cortex-M's another.
    """
    names = {id(mod): name for name, mod in prepared.named_modules()}
    h = hashlib.sha256()
    try:
        for name, mod in prepared.named_modules():
            h.update(f"\n{name}:{describe(mod, names, top=True)}".encode())
        for batch in batches:
            h.update(describe(list(batch), names).encode())
    except Unstable:
        return None
    return h.hexdigest()[:20]


