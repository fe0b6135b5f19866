"""Text generation's own steps through the pipeline: a language model's capture with a
static KV cache, its weights quantized before capture, its lowering and the greedy-decoding
proof (``llm``: ``TextGeneration``), the in-place cache and attention (``kvcache``), int4
scales by row block (``hqq``). What a text-generation family is, its specs and its builder
are ``families/text.py``'s."""
