"""The tiny tokenizer's words, in a module of their own: a test file cannot import ``conftest`` by name,
since each test folder has its own and whichever pytest loaded last answers to that name."""

TINY_VOCAB = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] a an the man woman cat dog person people is are was sleeping "
    "running sits . , ! ? \" ' 1996 na yes no not"
).split()
"""Words of the tiny tokenizer: enough for hand-written fixtures, small enough to build instantly."""
