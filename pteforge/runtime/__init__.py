"""This machine's ExecuTorch runtime: what it can run (``host``), what a ``.pte`` file says
of itself without running it (``pte``), the child process that opens untrusted programs
(``isolate``, ``child``), and the emulated Arm64 runtime (``arm64``, ``arm64_setup``)."""
