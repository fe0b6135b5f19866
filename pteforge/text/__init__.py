"""Text generation: language models with a KV cache — their build, capture and steps
(``llm``: ``TextGeneration``, the greedy-decoding proof), the in-place cache and attention
(``kvcache``). Their families are ``families/text.py`` subclasses."""
