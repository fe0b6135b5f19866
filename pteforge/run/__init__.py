"""One export run below the API: its jobs as typed callables (``jobs``), the steps every
(model, target) goes through (``pipeline``), the worker pool and its Ray twin (``workers``,
``ray_pool``), the order jobs start in (``schedule``), the artifact cache (``cache``) and the
timing of what runs here (``speed``)."""
