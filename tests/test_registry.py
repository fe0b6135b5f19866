import pytest

from pteforge.core.errors import UnknownNameError, UsageError
from pteforge.core.registry import Registry
from pteforge.core.spec import InputSpec, Precision, Target, TargetRequest


def test_registry_refuses_duplicates_naming_both():
    reg = Registry("backend")
    reg.register("xnnpack", "first")
    with pytest.raises(ValueError, match="already registered by 'first'.*'second'"):
        reg.register("xnnpack", "second")


def test_registry_alias_cannot_shadow_a_name():
    reg = Registry("backend")
    reg.register("ethos-u55", "u55", aliases=("arm",))
    with pytest.raises(ValueError, match="already registered"):
        reg.register("arm", "other")


def test_unknown_name_lists_valid_names_and_closest():
    reg = Registry("backend")
    for n in ("xnnpack", "coreml", "vulkan"):
        reg.register(n, n)
    with pytest.raises(UnknownNameError) as err:
        reg.get("xnnpak")
    assert "Did you mean 'xnnpack'?" in str(err.value)
    assert "Available: xnnpack, coreml, vulkan" in str(err.value)


def test_resolve_accepts_aliases_and_spellings():
    reg = Registry("backend")
    reg.register("cortex-m", "cm", aliases=("cortex_m",))
    assert reg.resolve("cortex_m") == "cortex-m"
    assert reg.resolve("CORTEX-M") == "cortex-m"


def test_each_registry_is_fresh():
    a, b = Registry("x"), Registry("x")
    a.register("one", 1)
    assert "one" not in b


@pytest.mark.parametrize(
    "text, backends, precision",
    [
        ("xnnpack", ("xnnpack",), None),
        ("vulkan+xnnpack", ("vulkan", "xnnpack"), None),
        ("xnnpack:int8", ("xnnpack",), Precision.INT8),
        ("coreml+xnnpack:fp16", ("coreml", "xnnpack"), Precision.FP16),
    ],
)
def test_target_request_parse(text, backends, precision):
    req = TargetRequest.parse(text)
    assert req.backends == backends and req.precision == precision


@pytest.mark.parametrize("text", ["", "xnnpack:", "+xnnpack", "xnnpack:int8:fp16", "a b"])
def test_malformed_targets_are_usage_errors(text):
    with pytest.raises(UsageError):
        TargetRequest.parse(text)


def test_unknown_precision_names_valid_ones():
    with pytest.raises(UsageError, match="Did you mean 'int8'"):
        TargetRequest.parse("xnnpack:int9")


def test_target_names_and_file_slugs():
    t = Target(("vulkan", "xnnpack"), Precision.FP32)
    assert t.name == "vulkan+xnnpack" and t.slug == "vulkan-xnnpack"
    q = Target(("xnnpack",), Precision.INT8, default_precision=False)
    assert q.name == "xnnpack:int8" and q.slug == "xnnpack_int8"


@pytest.mark.parametrize("shape", ["", "1,a", "0,3", "-1,3", "1,,3"])
def test_bad_input_shapes(shape):
    with pytest.raises(UsageError, match="--input-shape"):
        InputSpec.parse(shape)


def test_bad_input_dtype():
    with pytest.raises(UsageError, match="--input-dtype"):
        InputSpec.parse("1,3", "complex64")
