"""What a backend's SDK imports in a worker: only what lowering uses."""

import json
import subprocess
import sys
import textwrap

import pytest

CODE = textwrap.dedent("""
    import json, sys
    {first}
    from pteforge.backends.coreml import coremltools
    ct = coremltools()
    from coremltools import _deps
    print(json.dumps({{"modules": sorted(m for m in ("sklearn", "transformers") if sys.modules.get(m) is not None),
                      "none": sorted(m for m, v in sys.modules.items() if v is None and m in ("sklearn", "transformers")),
                      "hf": _deps._HAS_HF, "sklearn": _deps._HAS_SKLEARN, "convert": callable(ct.convert)}}))
""")


@pytest.mark.parametrize("first", ["", "import transformers"])
def test_coremltools_is_imported_without_the_libraries_only_its_other_converters_use(first):
    """coremltools' ``_deps`` import scikit-learn and transformers to say whether they are
    there (2.6 of 3.3 s here): a worker lowering for Core ML imports neither, coremltools
    says scikit-learn is absent (as it would for the installed version anyway), and nothing
    is left marked unimportable. One already imported stays as it is."""
    run = subprocess.run([sys.executable, "-c", CODE.format(first=first)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["convert"] and found["none"] == [] and found["sklearn"] is False
    if first:
        assert found["modules"] == ["transformers"] and found["hf"] is True
    else:
        assert found["modules"] == [] and found["hf"] is False
