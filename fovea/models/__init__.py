"""Model builders: the bundled synthetic-world VLM (a small transformers Llava) and its tokenizer."""
