"""The ground floor: plain data and the helpers every other part uses — errors, specs and
options, statuses and records, the registry type, durable files, units, the operating
system's differences, timing and input samples. It imports nothing above it
(``[tool.importlinter]`` in pyproject.toml)."""
