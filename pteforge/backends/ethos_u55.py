from __future__ import annotations

from ._arm import EthosU


class EthosU55(EthosU):
    name = "ethos-u55"
    order = 80
    priority = {"embedded": 0}
    aliases = ("arm", "ethos-u", "ethosu", "u55")
    target = "ethos-u55-128"
    system = "A Cortex-M (M55/M85) with an Ethos-U55 NPU, e.g. Corstone-300."
    use_case = "Ultra-low-power int8 inference on Cortex-M microcontrollers with an Ethos-U55 NPU"
