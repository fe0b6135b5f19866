"""Tiny models for fast tests: real torch modules, exported and lowered for real."""

import json
import os

import torch


class TinyNet(torch.nn.Module):
    """conv + relu + pool + linear: every backend that lowers here takes it."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        log = os.environ.get("TINY_TRACE_LOG")
        if log and isinstance(x, torch._subclasses.fake_tensor.FakeTensor):
            with open(log, "a") as f:  # one line per symbolic trace (torch.export)
                f.write(f"{os.getpid()}\n")
        y = torch.relu(self.conv(x))
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


class Stepper(torch.nn.Module):
    """A streaming model: each call counts itself in a buffer, in place, and adds the
    count to its output (BatchNorm too, for statistics re-estimated at export)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x):
        self.steps.add_(1)
        return self.bn(self.conv(x)) + self.steps


def stepper():
    return Stepper()


class Crushed(torch.nn.Module):
    """One input channel 100 times the others, which its linear does not read: int8's one
    scale for the whole tensor rounds the channels it does read to nothing."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 8)
        self.register_buffer("gain", torch.tensor([100.0] + [1.0] * 31))
        with torch.no_grad():
            self.fc.weight[:, 0] = 0.0

    def forward(self, x):
        return self.fc(x * self.gain)


def crushed():
    torch.manual_seed(0)
    return Crushed()


class DataDependent(torch.nn.Module):
    """Branches on a tensor value: torch.export cannot capture it."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return -self.fc(x)


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 8)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, tokens, scale):
        return self.fc(self.emb(tokens).mean(1)) * scale


class WeightyNet(torch.nn.Module):
    """Small, but weights dominate its program: reduced precisions show in the file size."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64, 512)
        self.fc2 = torch.nn.Linear(512, 10)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc2(torch.relu(self.fc1(y)))


def weighty():
    torch.manual_seed(0)
    return WeightyNet()


@torch.library.custom_op("pteforge_test::double", mutates_args=())
def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_double.register_fake
def _(x):
    return torch.empty_like(x)


def custom_op():
    """A model calling a torch.library operator its module registers (no out variant)."""
    class CustomOp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.ops.pteforge_test.double(self.fc(x))

    torch.manual_seed(0)
    return CustomOp()


def embedding(rows=16):
    """Token ids in, through an embedding of ``rows`` rows."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(rows, 8), torch.nn.Flatten(), torch.nn.Linear(48, 4))


def half(dtype="float16"):
    """A model in half precision (float16, or bfloat16), taking and giving such tensors."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).to(getattr(torch, dtype))


def tiny():
    if os.environ.get("TINY_BREAK"):  # same name, a model torch.export cannot capture
        return DataDependent()
    if os.environ.get("PTEFORGE_TEST_PROBE"):  # what the process building the model sees
        with open(os.environ["PTEFORGE_TEST_PROBE"], "w") as f:
            json.dump({"run_id": os.environ.get("PTEFORGE_RUN_ID", ""), "niceness": os.nice(0)}, f)
    return TinyNet()


class Crash(torch.nn.Module):
    """Kills the process that runs it (as native code can), or hangs."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        import signal
        import time

        if self.how == "hang":
            time.sleep(3600)
        os.kill(os.getpid(), getattr(signal, self.how))
        return self.fc(x)


def segfaults():
    return Crash("SIGSEGV")


def sigkills():
    return Crash("SIGKILL")


def hangs():
    return Crash("hang")


def data_dependent():
    return DataDependent()


def two_inputs():
    return TwoInputs()


class StructuredOutputs(torch.nn.Module):
    """Returns more than one tensor, structured: a dict whose insertion order is not its
    sorted order ("logits" after "features" would sort first), a namedtuple, an int, None;
    or (``nothing``) no tensor at all."""

    Pair = __import__("collections").namedtuple("Pair", ["wide", "narrow"])

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.conv = torch.nn.Conv2d(3, 6, 3)
        self.fc = torch.nn.Linear(6, 2)

    def forward(self, x):
        features = self.conv(x).mean((2, 3))
        logits = self.fc(features)
        if self.how == "dict":
            return {"logits": logits, "features": features}
        if self.how == "namedtuple":
            return self.Pair(features, logits)
        if self.how == "nothing":
            return 3, None
        return logits, 3, None, [features]


def structured(how="dict"):
    torch.manual_seed(0)
    return StructuredOutputs(how)


class HiddenStates(torch.nn.Module):
    """One field of a Hugging Face model's output (an encoder's last hidden state, a language
    model's logits), as a plain tensor."""

    def __init__(self, model, field="last_hidden_state"):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, x):
        return getattr(self.model(x), self.field)


def vit():
    """A one-layer Hugging Face ViT over 32×32 images (transformers' own attention mask code)."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       image_size=32, patch_size=8)
    return HiddenStates(ViTModel(config, add_pooling_layer=False))


def eager_quantized():
    """A convolution quantized by torch.ao's eager mode (packed quantized::conv2d weights)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.ao.quantization.QuantStub(), torch.nn.Conv2d(3, 4, 3),
                                torch.ao.quantization.DeQuantStub()).eval()
    model.qconfig = torch.ao.quantization.get_default_qconfig("x86")
    torch.ao.quantization.prepare(model, inplace=True)
    model(torch.rand(1, 3, 8, 8))
    return torch.ao.quantization.convert(model)


class Upcast(torch.nn.Module):
    """A softmax computed in fp32 whatever the model's dtype, as Hugging Face attention does
    (``softmax(x.to(torch.float32)).to(x.dtype)``)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return torch.softmax(y.to(torch.float32), -1).to(y.dtype)


def upcast():
    torch.manual_seed(0)
    return Upcast()


class Branches(torch.nn.Module):
    """A linear layer, then torch.cond between two more that share weights."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.first(x)
        return torch.cond(y.sum() > 0, lambda y: self.head(y), lambda y: -self.head(y), (y,))


def branches():
    torch.manual_seed(0)
    return Branches()


def conv3d():
    """A 3-D convolution: ExecuTorch 1.5.1's portable kernels take 1-D and 2-D only
    (pteforge writes it as 2-D ones for the portable and XNNPACK targets)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv3d(3, 4, 3), torch.nn.Flatten())


def conv_transpose3d():
    """A 3-D transposed convolution: the portable kernels refuse it at run time."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.ConvTranspose3d(3, 4, 2), torch.nn.Flatten())


class _Residual3d(torch.nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.a = torch.nn.Conv3d(3, c, 3, padding=1, bias=False)
        self.b = torch.nn.Conv3d(c, c, 3, padding=1, bias=False)
        self.fc = torch.nn.Linear(c, 4)

    def forward(self, x):
        x = torch.relu(self.a(x))
        x = torch.relu(self.b(x) + x)
        return self.fc(x.mean((2, 3, 4)))


def residual_conv3d():
    """Two 3-D convolutions with a residual add (a video network's block, torchvision's
    r3d_18): ExecuTorch 1.5.1's XNNPACK int8 program of it fails to load, unless the
    time padding is quantized (pteforge does)."""
    torch.manual_seed(0)
    return _Residual3d().eval()


def not_a_module():
    return {"weights": [1, 2, 3]}


def raises():
    raise RuntimeError("the checkpoint server is down")


def downloads():
    """A factory whose weights download finds no network, as torch.hub's does offline."""
    import urllib.error

    try:
        raise OSError(-2, "Name or service not known")
    except OSError as exc:
        raise urllib.error.URLError(exc) from exc


class Sized(torch.nn.Module):
    def __init__(self, width: int, classes: int, bias: bool):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, width, 3, padding=1, bias=bias)
        self.fc = torch.nn.Linear(width, classes)

    def forward(self, x):
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).flatten(1))


def sized(width=8, classes=10, *, bias=True):
    """A factory that takes arguments (as torchvision's do)."""
    return Sized(width, classes, bias)


def torch_threads(seconds: float = 0.0, on_stage=None) -> int:
    """A worker job (``tiny_models:torch_threads``): the intra-op threads torch would use,
    after ``seconds`` (jobs that overlap for certain)."""
    import time

    time.sleep(seconds)
    return torch.get_num_threads()


def pid_after(seconds: float, on_stage=None) -> int:
    """A worker job (``tiny_models:pid_after``): which worker ran it, after ``seconds``."""
    import time

    time.sleep(seconds)
    return os.getpid()


def dies(on_stage=None) -> None:
    """A worker job (``tiny_models:dies``) whose process segfaults."""
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


def ultralytics_checkpoint(path, kind: str = "DetectionModel", names=("cat", "dog", "fox"), imgsz: int = 64,
                           base: str = "yolov8n.yaml", kpt_shape=None, **extra) -> None:
    """A checkpoint as ``yolo train`` leaves it (``BaseTrainer.save_model``, then Ultralytics'
    own ``strip_optimizer``), of a tiny model (``base`` at 1/16 of yolov8n's width) of
    ``names``' classes; ``extra`` items are pickled into it beside the model."""
    from copy import deepcopy

    from ultralytics.nn import tasks
    from ultralytics.utils.torch_utils import strip_optimizer

    cfg = tasks.yaml_model_load(base)
    cfg["scales"] = {"n": [0.33, 0.0625, 1024]}
    if kpt_shape:
        cfg["kpt_shape"] = kpt_shape
    torch.manual_seed(0)
    model = getattr(tasks, kind)(cfg, nc=len(names), verbose=False)
    model.names = dict(enumerate(names))
    torch.save({"epoch": 3, "best_fitness": 0.5, "model": None, "ema": deepcopy(model).half(), "updates": 12,
                "optimizer": {"state": {}, "param_groups": []}, "train_args": {"imgsz": imgsz, "task": "detect", "epochs": 4},
                "train_metrics": {"metrics/mAP50(B)": 0.5}, "train_results": None}, path)
    strip_optimizer(path)
    if extra:
        saved = torch.load(path, weights_only=False)
        torch.save({**saved, **extra}, path)


class Calls:
    """Pickled as a call of ``fn(*args)``, as a hostile checkpoint would be."""

    def __init__(self, fn, *args):
        self.call = (fn, args)

    def __reduce__(self):
        return self.call


class Degenerate(torch.nn.Module):
    """``nan``: NaN wherever the input is above 0.5 (the model's own fault); ``constant``: the
    same output whatever the input (inputs that cannot exercise it); ``with_constant``: its
    output and a constant beside it; ``log_zero``: log-probabilities, minus infinity where a
    probability is 0 (a value, not a fault)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x).mean((2, 3))
        if self.how == "nan":
            return y + torch.log(0.5 - x.amax((1, 2, 3))).unsqueeze(1)  # log of a negative: NaN
        if self.how == "with_constant":
            return y, torch.ones(2)
        if self.how == "log_zero":
            return torch.log(torch.relu(y))
        return y * 0 + 1.0


def degenerate(how="nan"):
    torch.manual_seed(0)
    return Degenerate(how)


class Noisy(Degenerate):
    """Prints to stdout and stderr, from Python and from the C library, as chatty libraries
    do, and gives NaN (so its rows fail)."""

    def forward(self, x):
        import ctypes
        import sys

        print("NOISE on stdout from the model")
        print("NOISE on stderr from the model", file=sys.stderr)
        libc = ctypes.CDLL(None)
        libc.write(2, b"NOISE from native code\n", 23)
        return super().forward(x)


def noisy():
    torch.manual_seed(0)
    return Noisy("nan")


class NhwcBeforeLinear(torch.nn.Module):
    """facenet-pytorch's MTCNN RNet, in small: convolutions and PReLUs, then a permute to
    NHWC before its dense layers, whose PReLU XNNPACK's ChannelsLastTaggedReshapePass
    crashed on ("Attempting to convert non-NHWC compatible node to NHWC")."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = torch.nn.Conv2d(3, 8, 3), torch.nn.PReLU(8)
        self.pool = torch.nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = torch.nn.Conv2d(8, 16, 3), torch.nn.PReLU(16)
        self.dense, self.prelu3 = torch.nn.Linear(16 * 7 * 7, 32), torch.nn.PReLU(32)
        self.out = torch.nn.Linear(32, 2)

    def forward(self, x):  # x: 1x3x20x20
        x = self.prelu2(self.conv2(self.pool(self.prelu1(self.conv1(x)))))
        x = x.permute(0, 3, 2, 1).contiguous()
        return torch.softmax(self.out(self.prelu3(self.dense(x.view(x.shape[0], -1)))), dim=1)


def nhwc_before_linear():
    torch.manual_seed(0)
    return NhwcBeforeLinear().eval()


class Unbatched(torch.nn.Module):
    """A convolution and a max pool fed one image without a batch dim ([3, H, W]): XNNPACK's
    ChannelsLastTaggedReshapePass crashes on the 3-D max pool ("Attempting to convert
    non-NHWC compatible node to NHWC")."""

    def __init__(self):
        super().__init__()
        self.conv, self.pool, self.fc = torch.nn.Conv2d(3, 8, 3), torch.nn.MaxPool2d(2), torch.nn.Linear(8 * 3 * 3, 4)

    def forward(self, x):  # x: 3x8x8
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten())


def unbatched():
    torch.manual_seed(0)
    return Unbatched().eval()


class Dominant(torch.nn.Module):
    """Each output dominated by one weight (1.0 among 0.01s): flipping that weight's sign in
    a lowered program turns its output around, which no SQNR threshold lets through."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[1.0, 0.01, 0.01, 0.01], [0.01, 1.0, 0.01, 0.01]]))

    def forward(self, x):
        return self.fc(x)


def dominant():
    return Dominant().eval()


class Spread(torch.nn.Module):
    """Scales one channel by ``factor`` (or back, with ``1 / factor``): between the two, that
    channel's range is all an int8 tensor of the whole activation can hold."""

    def __init__(self, factor: float):
        super().__init__()
        self.register_buffer("scale", torch.tensor([1.0] * 7 + [factor]).view(1, 8, 1, 1))

    def forward(self, x):
        return x * self.scale


class BreaksInt8(torch.nn.Module):
    """A small convolutional net that int8 breaks at one known layer, ``spread``: its output's
    one huge channel leaves the other seven a few int8 steps, and ``gather`` scaling it back
    cannot restore them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.spread, self.gather = Spread(200.0), Spread(1 / 200.0)
        self.conv2 = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.conv2(self.gather(self.spread(torch.relu(self.conv1(x)))))


def breaks_int8():
    return BreaksInt8().eval()


class MyClassifier(torch.nn.Module):
    """A user's own small classifier of three classes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


class MyDetector(torch.nn.Module):
    """A user's own small detector in Ultralytics' output layout: per anchor of a stride-8
    grid, a box (cx, cy, w, h, in input pixels) and two class scores: [1, 4 + 2, anchors]."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 8, stride=8)

    def forward(self, x):
        y = self.conv(x).flatten(2)  # [1, 6, anchors]
        side = x.shape[-1] // 8
        idx = torch.arange(side * side, dtype=x.dtype)
        cx, cy = (idx % side + 0.5) * 8, (idx // side + 0.5) * 8
        box = torch.stack([cx + y[:, 0], cy + y[:, 1], 8 + 4 * y[:, 2].sigmoid(), 8 + 4 * y[:, 3].sigmoid()], 1)
        return torch.cat([box, y[:, 4:].sigmoid()], 1)


def build():
    """A factory whose name says nothing of the model: it is named after this file."""
    return MyClassifier().eval()


def my_detector():
    return MyDetector().eval()


class HardswishNet(torch.nn.Module):
    """Convolution, batch norm, hardswish, as MobileNetV3 starts, and a hardsigmoid beside it:
    ExecuTorch 1.5.1's Cortex-M passes left such operators on int8 values (pteforge mends
    them: backends/cortex_m.py), and the quantizer leaves the hardsigmoid on floats."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return self.fc((torch.nn.functional.hardswish(y) + torch.nn.functional.hardsigmoid(y)).mean((2, 3)))


def hardswish_net():
    return HardswishNet().eval()


class Shuffled(torch.nn.Module):
    """Convolutions around ShuffleNet's channel shuffle, whose ``.contiguous()`` lays the
    activations out NCHW again, and a residual path: every convolution should be int8."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.first(x))
        b, c, h, w = y.shape
        shuffled = y.view(b, 2, c // 2, h, w).transpose(1, 2).contiguous().view(b, c, h, w)
        return self.fc((torch.relu(self.second(shuffled)) + y).mean((2, 3)))


def shuffled():
    return Shuffled().eval()


class OneChannelUpsampler(torch.nn.Module):
    """Down, up with a transposed convolution and a pixel shuffle to one channel: a mask. In
    NHWC its last tensors have strides that fit several dim orders."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)

    def forward(self, x):
        return torch.sigmoid(torch.nn.functional.pixel_shuffle(self.up(torch.relu(self.down(x))), 2))


def one_channel_upsampler():
    return OneChannelUpsampler().eval()


class AttentionBlock(torch.nn.Module):
    """Patches, a pre-norm attention and MLP block, a softmax head: a small vision transformer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.patch = torch.nn.Conv2d(3, 16, 8, stride=8)
        self.norm = torch.nn.LayerNorm(16)
        self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        h = self.norm(t)
        t = t + self.attention(h, h, h, need_weights=False)[0]
        t = t + self.mlp(self.norm(t))
        return self.head(t.mean(1)).softmax(-1)


def attention_block():
    return AttentionBlock().eval()


class Splits(torch.nn.Module):
    """Splits a convolution's output in two and joins the halves again: operators whose out
    arguments are lists of tensors."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        a, b = torch.split(self.conv(x), [3, 5], dim=1)
        return torch.cat([torch.relu(b), a.sigmoid()], 1)


def splits():
    return Splits().eval()


class ReluBesideConv(torch.nn.Module):
    """ShuffleNet V2's block in small: a ReLU'd convolution split in two, one half through
    another convolution with no activation, the halves joined again. The join shares one
    quantization, so the ReLU's range reaches below zero: a fused ReLU must clamp."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        kept, branch = torch.relu(self.first(x)).chunk(2, dim=1)
        return torch.cat((kept, self.second(branch)), dim=1)


def relu_beside_conv():
    return ReluBesideConv().eval()


class Relu6BesideSplit(torch.nn.Module):
    """A convolution's channels split: a ReLU6 (which the Arm backends leave to the CPU after
    a split) and a tanh magnitude, joined again."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)

    def forward(self, x):
        a, b = self.conv(x).split(3, dim=1)
        return torch.cat([torch.nn.functional.relu6(a), torch.tanh(b).abs()], 1)


def relu6_beside_split():
    return Relu6BesideSplit().eval()


class UNetish(torch.nn.Module):
    """A U-Net's step in small: down (max-pool), up (a transposed convolution and ReLU), and
    the skip joined through a plain 1x1 convolution: the ReLUs share their ranges through
    the pool and the join, below zero."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.down = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.deep = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.up = torch.nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.skip = torch.nn.Conv2d(8, 8, 1)
        self.head = torch.nn.Conv2d(16, 4, 1)

    def forward(self, x):
        a = torch.relu(self.down(x))
        b = torch.relu(self.deep(torch.nn.functional.max_pool2d(a, 2)))
        return self.head(torch.cat((torch.relu(self.up(b)), self.skip(a)), 1))


def unetish():
    return UNetish().eval()


class MaskedFill(torch.nn.Module):
    """Where a mask (a second, bool input) is off, a constant instead of the features:
    zeros like them, or a float fill of its own shape."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, keep):
        y = self.fc(x)
        return torch.where(keep, y, torch.zeros_like(y)), torch.where(keep, y, torch.full((4, 8), -0.25))


def masked_fill():
    return MaskedFill().eval()


class Ranked(torch.nn.Module):
    """Scores ranked: sorted (values and their indices, descending) and the four best
    gathered by ``argsort``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        y = self.fc(x)
        values, indices = y.sort(-1, descending=True)
        return values, indices, y.gather(-1, y.argsort(-1)[:, :4])


def ranked():
    return Ranked().eval()


class Spectrum(torch.nn.Module):
    """Features, then the magnitude of their FFT: complex values on the CPU between int8 parts."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(9, 4)

    def forward(self, x):
        return self.head(torch.fft.rfft(self.fc(x), dim=-1).abs())


def spectrum():
    return Spectrum().eval()


class Listener(torch.nn.Module):
    """A tiny audio model: a window of samples to two scores."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.conv = torch.nn.Conv1d(1, 8, 9, stride=2)
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(-1))


def listener():
    return Listener().eval()


_LEFT_IN_WORKER: list = []


def leaves_state(folder: str, on_stage=None) -> str:
    """A worker job (``tiny_models:leaves_state``): what a lowering leaves behind in its worker:
    an exit handler to run, a temporary folder to remove, and a thread that never ends (an
    interpreter's normal exit waits for it); returns the temporary folder."""
    import atexit
    import tempfile
    import threading

    atexit.register(lambda: open(os.path.join(folder, "atexit"), "w").close())
    kept = tempfile.TemporaryDirectory()
    threading.Thread(target=threading.Event().wait).start()
    _LEFT_IN_WORKER.append(kept)
    return kept.name


_WEAK: dict = {}  # worker jobs' weak references, from one job to the next


def keeps_a_program(name: str, on_stage=None) -> tuple:
    """A worker job: keep a tiny program in ``stages.memo`` under ``name``, with room for
    two such (a third pushes out the first). (objects frozen when it started, the names
    kept, whether the first program's graph module is still alive)"""
    import gc
    import weakref

    from pteforge.stages import memo

    frozen = gc.get_freeze_count()
    program = torch.export.export(torch.nn.Linear(2, 2), (torch.rand(1, 2),))
    memo.BUDGET = 2 * memo._size(program) + 1
    memo.keep(name, program)
    _WEAK.setdefault("first", weakref.ref(memo._kept[name][0].graph_module))  # in a cycle with its graph
    return frozen, list(memo._kept), _WEAK["first"]() is not None


def loaded(module: str, on_stage=None) -> bool:
    """A worker job: whether ``module`` was imported before the job ran."""
    import sys

    return module in sys.modules


def worker_facts(name: str, on_stage=None) -> tuple:
    """A worker job (``tiny_models:worker_facts``): environment variable ``name`` as the
    worker sees it, its collector's thresholds, and how many objects it froze."""
    import gc
    import os

    return os.environ.get(name), gc.get_threshold(), gc.get_freeze_count()


class Dithered(torch.nn.Module):
    """Adds noise with ``rand_like``: XNNPACK takes the linear layer, and the program calls
    ``aten::rand_like.out``, a kernel no ExecuTorch library has."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) + 0.01 * torch.rand_like(x)


def dithered():
    return Dithered()


class OwnMatmul(torch.nn.Module):
    """A weight applied with ``@``, not by a Linear (``x @ self.w``: an attention projection,
    an ONNX file's MatMul by an initializer)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 4))

    def forward(self, x):
        return (x @ self.w).relu()


def own_matmul():
    return OwnMatmul()


class OnlyRecurrent(torch.nn.Module):
    """An LSTM and nothing else: no operator XNNPACK's int8 quantizer takes."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 6, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0][:, -1]


def only_recurrent():
    return OnlyRecurrent()


class LinearRecurrentMatmul(torch.nn.Module):
    """A Linear, which XNNPACK's int8 quantizer takes, an LSTM, which it does not, then a
    weight applied with ``@`` to the LSTM's float output, which it then does not either."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)
        self.register_buffer("w", torch.randn(8, 4))

    def forward(self, x):
        return self.lstm(self.fc(x).relu())[0][:, -1] @ self.w


def linear_recurrent_matmul():
    return LinearRecurrentMatmul()


class NearTie(torch.nn.Module):
    """Logits whose two largest are nearly tied on every input, and their argmax: a class id
    that int8's rounding flips, while the logits' SQNR stays high."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)
        with torch.no_grad():
            self.fc.weight[1] = self.fc.weight[0] + 1e-3 * torch.randn(16)
            self.fc.bias[:2] = 20.0

    def forward(self, x):
        logits = self.fc(x)
        return logits, logits.argmax(-1)


def near_tie():
    torch.manual_seed(0)
    return NearTie()


class BytesImage(torch.nn.Module):
    """An app's RGB bytes in, divided by 255 inside the model."""

    def __init__(self, nhwc: bool):
        super().__init__()
        self.nhwc = nhwc
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = x.permute(0, 3, 1, 2) if self.nhwc else x
        return self.fc(self.conv(x.float() / 255.0).mean((2, 3)))


def bytes_image(layout="NCHW"):
    torch.manual_seed(0)
    return BytesImage(layout == "NHWC")


class InPlace(torch.nn.Module):
    """Changes its input in place, the second one through a view, before using them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x, y):
        x.mul_(0.5)
        y[:, :2].add_(1.0)
        return self.conv(x) + y[:, :1].mean()


def in_place():
    torch.manual_seed(0)
    return InPlace().eval()


class ScaledInPlace(torch.nn.Module):
    """In-place arithmetic with scalars on a layer's output."""

    def __init__(self):
        super().__init__()
        self.conv, self.mix = torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        y.mul_(0.5)
        y += 1.0
        return self.mix(y)


def scaled_in_place():
    torch.manual_seed(0)
    return ScaledInPlace().eval()


class ConvTwice(torch.nn.Module):
    """One convolution, with its bias, applied twice."""

    def __init__(self):
        super().__init__()
        self.stem, self.conv = torch.nn.Conv2d(3, 4, 1), torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(self.conv(self.stem(x)).relu())


def conv_twice():
    torch.manual_seed(0)
    return ConvTwice().eval()


class Categorical(torch.nn.Module):
    """A categorical feature of 3 levels beside 1,000 token ids."""

    def __init__(self):
        super().__init__()
        self.tokens, self.level, self.head = torch.nn.Embedding(1000, 8), torch.nn.Embedding(3, 8), torch.nn.Linear(8, 2)

    def forward(self, ids, levels):
        return self.head(self.tokens(ids) + self.level(levels))


def categorical():
    return Categorical().eval()


def needs_width(width, depth=2):
    """A factory that takes arguments."""
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)]).eval()


class ShiftedLevels(Categorical):
    """Its levels shifted on the way in: no table's size bounds the ids it is fed."""

    def forward(self, ids, levels):
        return self.head(self.tokens(ids) + self.level(levels + 1))


def shifted_levels():
    return ShiftedLevels().eval()


class Positions(torch.nn.Module):
    """Looks up a table at integer positions it computes (``arange(n) + offset``), as a
    Hugging Face attention mask does."""

    def __init__(self):
        super().__init__()
        self.table, self.mix = torch.nn.Parameter(torch.randn(16, 4)), torch.nn.Linear(4, 4)

    def forward(self, x):
        positions = torch.arange(x.shape[1]) + 2
        return self.mix(x + self.table[positions])


def positions():
    torch.manual_seed(0)
    return Positions().eval()


class Lookups(torch.nn.Module):
    """Integer inputs that index other operators than an embedding: a ``gather`` over 3
    scores and ``table[rows]`` of a 5-row table; ``shift`` moves the positions first,
    so that no size in the graph bounds them."""

    def __init__(self, shift=0):
        super().__init__()
        self.shift, self.score, self.table = shift, torch.nn.Linear(16, 3), torch.nn.Parameter(torch.randn(5, 3))

    def forward(self, x, positions, rows):
        picked = torch.gather(self.score(x), 1, positions + self.shift if self.shift else positions)
        return picked * self.table[rows].sum()


def lookups(shift=0):
    torch.manual_seed(0)
    return Lookups(shift).eval()


class LazyHead(torch.nn.Module):
    """A lazy layer: its weights exist once it has seen an input."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(3, 4, 3), torch.nn.LazyLinear(5)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


def lazy_head():
    return LazyHead().eval()


def on_meta():
    """TinyNet built on the meta device, as large models are: no values until loaded."""
    with torch.device("meta"):
        return TinyNet().eval()


def gpt2_tiny():
    """GPT-2 of 2 layers of width 32 over 100 token ids, random weights: its mask checks
    the positions for packed sequences (``diff`` of ``arange``, ``!= 1``), a constant once
    folded."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64, use_cache=False)
    return HiddenStates(GPT2LMHeadModel(config).eval(), "logits").eval()


class CarriesText(torch.nn.Module):
    """TinyNet with ``text``'s bytes as a constant of its program, as a backend that writes
    the model's source paths into its payload would have them."""

    def __init__(self, text: str):
        super().__init__()
        self.net = TinyNet()
        self.register_buffer("text", torch.tensor(list(text.encode()), dtype=torch.uint8))

    def forward(self, x):
        return self.net(x), self.text.clone()


def carries_text(text: str):
    return CarriesText(text).eval()


class ProjectedQuery(torch.nn.Module):
    """Attention of a projected query against the raw keys: a batch matmul of a linear's
    output and the input itself."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.bmm(self.q(x), x.transpose(1, 2)).softmax(-1)


def projected_query():
    return ProjectedQuery().eval()
