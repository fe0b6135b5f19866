"""One export run below the API: the engine built with its parts (``engine``), what it plans
and checks first (``plan``, ``checks``), its jobs as typed callables (``jobs``), the worker
pool and its Ray twin (``workers``, ``ray_pool``, ``pools``), the order jobs start in
(``schedule``), the artifact cache (``cache``), the manifest it writes as rows finish
(``sink``), what it measures and proves after (``measure``, ``speed``, ``arm64_proof``) and
the reports it ends with (``reports``)."""
