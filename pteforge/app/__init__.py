"""What an app sees of the artifacts: the images as the app prepares them (``vision``), each
platform's backend order (``platforms``), precision trade-offs (``precision``), the choice
an app makes at run time (``selection``: ``select``, ``load_best``), the published site
(``publish``), and the proofs on real photos and timings (``validate``, ``bench``)."""
