"""The project's one-pass block-drafter head format.

A block head reads the target's final hidden state ``h_t`` at the last
verified position (the one that predicted the pending root token ``b``) and
the root token's embedding, and returns logits for offsets ``1..L`` after the
root in one forward pass (Assumption 1: one marginal per offset, no
sequential steps). It shares the target's output embedding (``lm_head``) and
input embedding, as real draft heads do, so its own parameters stay far below
the target's.

Architecture (``kind="medusa"``): ``z = W_in [h_t ; e(b)]``, then for each
offset j a stack of residual SiLU blocks ``x <- x + W_2 silu(W_1 x)`` applied
to ``z + o_j`` (a learned offset embedding), a final RMSNorm, and the target's
``lm_head``. Offsets share the residual blocks when ``share_blocks`` is set.

On disk a head is a folder with ``config.json`` (``"format":
"glance-block-head"``) and ``model.safetensors``; :meth:`BlockHead.from_pretrained`
and :meth:`BlockHead.save_pretrained` read and write it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

FORMAT = "glance-block-head"
FORMAT_VERSION = 1


@dataclass
class BlockHeadConfig:
    hidden_size: int
    horizon: int = 15
    n_blocks: int = 2
    inner_size: int | None = None
    share_blocks: bool = False
    kind: str = "medusa"
    rms_eps: float = 1e-6

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(format=FORMAT, version=FORMAT_VERSION)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BlockHeadConfig:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a glance block head (config.json format={d.get('format')!r})")
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**fields)


class _ResBlock(nn.Module):
    def __init__(self, d: int, inner: int):
        super().__init__()
        self.w1 = nn.Linear(d, inner)
        self.w2 = nn.Linear(inner, d)
        nn.init.zeros_(self.w2.weight)
        nn.init.zeros_(self.w2.bias)

    def forward(self, x):
        return x + self.w2(nn.functional.silu(self.w1(x)))


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class BlockHead(nn.Module):
    """One-pass block head: ``forward(hidden, root_emb) -> features (B, L, d)``;
    :meth:`logits` applies the (shared) target ``lm_head``."""

    def __init__(self, config: BlockHeadConfig):
        super().__init__()
        self.config = config
        d = config.hidden_size
        inner = config.inner_size or d
        self.w_in = nn.Linear(2 * d, d)
        self.offset = nn.Parameter(torch.zeros(config.horizon, d))
        nn.init.normal_(self.offset, std=0.02)
        n_sets = 1 if config.share_blocks else config.horizon
        self.blocks = nn.ModuleList(
            nn.ModuleList(_ResBlock(d, inner) for _ in range(config.n_blocks)) for _ in range(n_sets))
        self.norm = _RMSNorm(d, config.rms_eps)

    @property
    def horizon(self) -> int:
        return self.config.horizon

    def forward(self, hidden: torch.Tensor, root_emb: torch.Tensor) -> torch.Tensor:
        z = self.w_in(torch.cat([hidden, root_emb], dim=-1))          # (B, d)
        outs = []
        for j in range(self.config.horizon):
            x = z + self.offset[j]
            for blk in self.blocks[0 if self.config.share_blocks else j]:
                x = blk(x)
            outs.append(x)
        return self.norm(torch.stack(outs, dim=1))                     # (B, L, d)

    def logits(self, hidden: torch.Tensor, root_ids: torch.Tensor, target) -> torch.Tensor:
        """Offset logits (B, L, V) using the target's input embedding and lm_head."""
        emb = target.get_input_embeddings()(root_ids)
        feats = self.forward(hidden.to(emb.dtype), emb)
        return target.get_output_embeddings()(feats)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # -- persistence --------------------------------------------------------
    def save_pretrained(self, path) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2, sort_keys=True) + "\n")
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(path / "model.safetensors"), metadata={"format": FORMAT})

    @classmethod
    def from_pretrained(cls, path, device=None, dtype=None) -> BlockHead:
        from safetensors.torch import load_file

        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise FileNotFoundError(f"{path}: no config.json; a block head folder holds config.json "
                                    "and model.safetensors (see docs/logger.md)")
        config = BlockHeadConfig.from_dict(json.loads(cfg_file.read_text()))
        head = cls(config)
        head.load_state_dict(load_file(str(path / "model.safetensors")))
        if dtype is not None or device is not None:
            head = head.to(device=device, dtype=dtype)
        return head.eval()


def is_block_head(path) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.exists():
        return False
    try:
        return json.loads(cfg.read_text()).get("format") == FORMAT
    except (OSError, json.JSONDecodeError):
        return False
