"""Character-level data: a text file, its vocabulary, a 90/10 train/val split,
and deterministic batches drawn from a seeded ``torch.Generator``.

The generator is the only source of randomness in batch sampling, so saving
and restoring its state (``CharData.state_dict``) makes a resumed run draw
exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["DEFAULT_TEXT", "CharData"]

# examples/char_gpt/ -> repo root -> its parent holds shared/
DEFAULT_TEXT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "shakespeare" / "shakespeare.txt"


class CharData:
    """``CharData(path, context, batch, seed)``; ``get_batch('train' | 'val')`` -> (x, y) int64 (batch, context)."""

    def __init__(
        self, path: str | Path = DEFAULT_TEXT, *, context: int, batch: int, seed: int = 0, val_fraction: float = 0.1
    ):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"text file {path} not found (pass --data PATH)")
        text = path.read_text(encoding="utf-8")
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        ids = (
            torch.tensor([self.stoi[c] for c in text], dtype=torch.int64)
            if len(text) < 100_000
            else torch.frombuffer(bytearray(self._encode_fast(text)), dtype=torch.int64).clone()
        )
        n_val = int(len(ids) * val_fraction)
        self.train_ids, self.val_ids = ids[: len(ids) - n_val], ids[len(ids) - n_val :]
        if min(len(self.train_ids), len(self.val_ids)) <= context + 1:
            raise ValueError(f"{path}: too short for context {context} ({len(ids)} characters)")
        self.path, self.context, self.batch = path, int(context), int(batch)
        self.generator = torch.Generator().manual_seed(seed)

    def _encode_fast(self, text: str) -> bytes:
        import numpy as np

        table = np.zeros(max(map(ord, self.chars)) + 1, dtype=np.int64)
        for c, i in self.stoi.items():
            table[ord(c)] = i
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        return table[codes].tobytes()

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def get_batch(self, split: str = "train", generator: torch.Generator | None = None):
        """``batch`` random windows of ``context + 1`` characters from ``split``."""
        data = self.train_ids if split == "train" else self.val_ids
        g = self.generator if generator is None else generator
        start = torch.randint(0, len(data) - self.context - 1, (self.batch,), generator=g)
        offs = torch.arange(self.context + 1)
        win = data[start[:, None] + offs]
        return win[:, :-1].contiguous(), win[:, 1:].contiguous()

    def val_batches(self, n: int, seed: int = 1234):
        """The same ``n`` validation batches every call (a fixed evaluation set)."""
        g = torch.Generator().manual_seed(seed)
        return [self.get_batch("val", g) for _ in range(n)]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
