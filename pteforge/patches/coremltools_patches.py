"""pteforge's patches of coremltools 9.0 (the version uv.lock pins): how often its MIL pass
pipeline validates the program.

Each patch checks, when applied, that coremltools is ``VERSION`` and still has what it
replaces (``pteforge.patches.require``), and the source of what it replaces (its digest),
and raises ``UpstreamChangedError`` otherwise; each puts back what it replaced on exit.
coremltools is installed on Linux x86-64 and macOS only: the patches are applied inside
Core ML's lowering, which runs only there.
"""

from __future__ import annotations

import contextlib

from . import replaced, require, source_changed, source_digest

LIBRARY, VERSION = "coremltools", "9.0"
_MODULE = __name__.rpartition(".")[2]
_DCE = "common::dead_code_elimination"

# coremltools' PassPipelineManager.apply_pipeline, whose passes ``_apply_pipeline`` runs
_PIPELINE_SOURCE = "7bae57bb"


def check(patch: str, *targets: tuple) -> None:
    """Raise ``UpstreamChangedError`` unless coremltools is ``VERSION`` and has each ``(object, attribute)``."""
    require(patch, LIBRARY, VERSION, _MODULE, *targets)


@contextlib.contextmanager
def pipeline_validated_where_scopes_are_checked():
    """Inside, coremltools' MIL pass pipeline validates the program before its first pass,
    after each dead code elimination (where coremltools also checks that no operation lost
    its scope information) and after its last pass, instead of after every pass.

    Validating walks the whole program and raises on an inconsistent one; it changes
    nothing. Converting mobilenet_v3_small ran the default pipeline's 95 passes and
    validated 96 times: 1.35 of the 3.3 s of Core ML's conversion (py-spy). Now 12 times.
    A pass that broke the program is still caught, by the next validation instead of its
    own. Used only while coremltools' method is the one it was written from (its source's
    digest); otherwise ``UpstreamChangedError``."""
    from coremltools.converters.mil.mil.passes import pass_pipeline

    manager = pass_pipeline.PassPipelineManager
    patch = "pipeline_validated_where_scopes_are_checked"
    check(patch, (manager, "apply_pipeline"))
    known = source_digest(manager.__dict__["apply_pipeline"].__func__)
    if known != _PIPELINE_SOURCE:
        raise source_changed(patch, LIBRARY, VERSION, _MODULE, "PassPipelineManager.apply_pipeline",
                             (_PIPELINE_SOURCE, known))
    with replaced(manager, "apply_pipeline", staticmethod(_apply_pipeline)):
        yield


def _apply_pipeline(prog, pass_pipeline) -> None:
    """coremltools 9.0's ``PassPipelineManager.apply_pipeline`` (the same passes, options,
    logging and errors), validating as ``pipeline_validated_where_scopes_are_checked`` says."""
    from coremltools.converters.mil.mil.passes import pass_pipeline as module

    if pass_pipeline is None:
        raise ValueError("The pass_pipeline cannot be None.")
    pass_pipeline.validate()
    prog.validate()
    logger = module.logger
    logger.debug(f"Program before {pass_pipeline} pipeline:\n{prog}")
    passes = list(pass_pipeline.passes)
    for pass_name in module.tqdm(passes, desc=f"Running MIL {pass_pipeline} pipeline", unit=" passes"):
        logger.debug(f'Performing pass: "{pass_name}"')
        pass_options = pass_pipeline.get_options(pass_name)
        if pass_options is not None:
            logger.debug(f"The graph pass options for {pass_name} is set to {pass_options}. "
                         f"It will change the pass behavior. Make sure the option is intended.")
        if pass_name.startswith("experimental::"):
            logger.warning(f"The graph pass {pass_name} is under experimental development, "
                           f"and the API could be changed in the future.")
        graph_pass = module.PASS_REGISTRY[pass_name]
        graph_pass.set_options(pass_options)
        try:
            graph_pass(prog)
        except Exception as e:
            logger.error(f"\n\nERROR - '{pass_name}' graph pass produces the following error:\n")
            raise e
        if pass_name == _DCE:
            prog.validate(check_essential_scope=True)  # as coremltools does after each
    if passes and passes[-1] != _DCE:
        prog.validate()
    logger.debug(f"Program after {pass_pipeline} pipeline:\n{prog}")
