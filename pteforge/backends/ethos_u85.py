from __future__ import annotations

from ._arm import EthosU


class EthosU85(EthosU):
    name = "ethos-u85"
    order = 90
    aliases = ("u85",)
    target = "ethos-u85-256"
    system = "A Cortex-M or Cortex-A system with an Ethos-U85 NPU, e.g. Corstone-320."
    use_case = "Low-power int8 inference on embedded systems with an Ethos-U85 NPU"
