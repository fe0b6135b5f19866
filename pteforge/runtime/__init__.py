"""This machine's ExecuTorch runtime: what it can run (``host``), what a ``.pte`` file says
of itself without running it (``pte``), and the child process that opens untrusted
programs (``isolate``, ``child``, ``silent``)."""
